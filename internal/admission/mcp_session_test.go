package admission

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// rawMCP posts one JSON-RPC message to url as token, in session sessionID (new
// when empty), and returns the status, the body and the session id.
func rawMCP(t *testing.T, url, token, sessionID, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if sessionID == "" {
		sessionID = resp.Header.Get("Mcp-Session-Id")
	}
	return resp.StatusCode, string(b), sessionID
}

const rawInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"attacker","version":"1"}}}`

// A session is bound to its task and its user, whatever path and token later
// requests carry: another proposer of the same task cannot ride it (the SDK's
// user binding), a proposer removed from the task is refused on its open session,
// and cannot go on through it by sending it to the path of another task it still
// proposes for (the session's id names its endpoint). No intent is created.
func TestMCPSessionIsBoundToItsUserAndItsTask(t *testing.T) {
	e := startMCP(t)
	ctx := t.Context()
	agent := "system:serviceaccount:" + e.ns + ":coding-agent"
	createTask(t, e.ns, "other", external(v1.Proposers{ServiceAccounts: []v1.ServiceAccountReference{{Namespace: e.ns, Name: "coding-agent"}}}))
	otherURL := strings.TrimSuffix(e.url, "/fix-tests") + "/other"

	status, body, session := rawMCP(t, e.url, e.agentToken, "", rawInitialize)
	if status != http.StatusOK || session == "" {
		t.Fatalf("initialize as the proposer: %d %s", status, body)
	}
	if status, body, _ := rawMCP(t, e.url, e.agentToken, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); status >= 300 {
		t.Fatalf("initialized: %d %s", status, body)
	}
	const call = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo %s"}}}`

	// The task's other proposer, with its own valid token, on the first one's session.
	status, body, _ = rawMCP(t, e.url, e.secondToken, session, fmt.Sprintf(call, 2, "hijack"))
	if status != http.StatusForbidden || !strings.Contains(body, "session user mismatch") {
		t.Errorf("another proposer on the session: %d %s; want 403 session user mismatch", status, body)
	}

	// coding-agent is removed from fix-tests' proposers mid-session.
	task := &v1.AgentTask{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "fix-tests"}, task); err != nil {
		t.Fatal(err)
	}
	unchanged := task.DeepCopy()
	task.Spec.Agent.External.Proposers = v1.Proposers{ServiceAccounts: []v1.ServiceAccountReference{{Namespace: e.ns, Name: "second-agent"}}}
	if err := env.Client.Patch(ctx, task, client.MergeFrom(unchanged)); err != nil {
		t.Fatal(err)
	}
	status, body, _ = rawMCP(t, e.url, e.agentToken, session, fmt.Sprintf(call, 3, "removed"))
	if status != http.StatusForbidden || !strings.Contains(body, agent+" may not propose calls for AgentTask "+e.ns+"/fix-tests") {
		t.Errorf("a removed proposer on its task's path: %d %s; want 403", status, body)
	}
	// The same session, sent to the path of a task it still proposes for: a session
	// serves the endpoint it was opened at only.
	for i, msg := range []string{fmt.Sprintf(call, 4, "via-other-path"), `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"toolgate_wait","arguments":{"intentName":"x"}}}`} {
		status, body, _ = rawMCP(t, otherURL, e.agentToken, session, msg)
		if status != http.StatusNotFound || !strings.Contains(body, "was not opened at this endpoint (AgentTask "+e.ns+"/other)") {
			t.Errorf("request %d of a session of fix-tests at the endpoint of other: %d %s; want 404 saying the session is not this endpoint's", i, status, body)
		}
	}
	// Each request was refused before it reached a tool: its answer is the moment
	// an intent it created would exist by.
	var intents v1.ToolIntentList
	if err := env.Client.List(ctx, &intents, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	for _, in := range intents.Items {
		if raw := string(in.Spec.Input.Raw); strings.Contains(raw, "hijack") || strings.Contains(raw, "removed") || strings.Contains(raw, "via-other-path") {
			t.Errorf("intent %s of task %s was created (requestedBy %s, input %s)", in.Name, in.Spec.TaskRef.Name, in.Spec.RequestedBy, raw)
		}
	}
}

// tools/call reads the task again and checks the caller is still its proposer
// (mcpserver's call), whatever the check of the same request's HTTP middleware saw
// a moment before: a proposer removed in between proposes nothing. The removal is
// made at that moment by a proxy in front of the API server, the one the endpoint
// talks to as the caller: it removes coding-agent from the task's proposers when
// the middleware's read of the task has been answered, before the answer reaches
// the middleware.
func TestMCPCallRechecksTheProposerAfterTheMiddleware(t *testing.T) {
	e := startMCP(t)
	agent := "system:serviceaccount:" + e.ns + ":coding-agent"
	taskPath := "/apis/" + v1.GroupVersion.Group + "/" + v1.GroupVersion.Version + "/namespaces/" + e.ns + "/agenttasks/fix-tests"
	var (
		mu      sync.Mutex
		armed   bool
		removed error
	)
	removeProposer := func(ctx context.Context) error {
		task := &v1.AgentTask{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "fix-tests"}, task); err != nil {
			return err
		}
		unchanged := task.DeepCopy()
		task.Spec.Agent.External.Proposers = v1.Proposers{ServiceAccounts: []v1.ServiceAccountReference{{Namespace: e.ns, Name: "second-agent"}}}
		return env.Client.Patch(ctx, task, client.MergeFrom(unchanged))
	}
	proxy := newAPIProxy(t)
	proxy.answered(func(resp *http.Response) {
		mu.Lock()
		defer mu.Unlock()
		if armed && resp.Request.Method == http.MethodGet && resp.Request.URL.Path == taskPath && resp.StatusCode == http.StatusOK {
			armed, removed = false, removeProposer(resp.Request.Context())
		}
	})
	endpoint := proxy.endpointBehind(t, e.ns, "fix-tests")

	status, body, session := rawMCP(t, endpoint, e.agentToken, "", rawInitialize)
	if status != http.StatusOK || session == "" {
		t.Fatalf("initialize as the proposer: %d %s", status, body)
	}
	if status, body, _ := rawMCP(t, endpoint, e.agentToken, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); status >= 300 {
		t.Fatalf("initialized: %d %s", status, body)
	}
	mu.Lock()
	armed = true
	mu.Unlock()
	status, body, _ = rawMCP(t, endpoint, e.agentToken, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo removed-meanwhile"}}}`)
	mu.Lock()
	stillArmed, err := armed, removed
	mu.Unlock()
	if stillArmed || err != nil {
		t.Fatalf("the proposer was not removed between the middleware and the call (armed %t): %v", stillArmed, err)
	}
	want := agent + " may not propose calls for AgentTask " + e.ns + "/fix-tests; its proposers are service accounts " + e.ns + "/second-agent"
	if !strings.Contains(body, want) {
		t.Errorf("a proposer removed after the middleware's check: %d %s; want the call refused saying %q", status, body, want)
	}
	// The call was answered: an intent it created would exist by now.
	var intents v1.ToolIntentList
	if err := env.Client.List(t.Context(), &intents, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	for _, in := range intents.Items {
		if strings.Contains(string(in.Spec.Input.Raw), "removed-meanwhile") {
			t.Errorf("intent %s was created for a caller no longer the task's proposer (requestedBy %s)", in.Name, in.Spec.RequestedBy)
		}
	}
}
