package admission

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mcpserver"
)

// A call that waits while nothing changes still hears from the endpoint (a heartbeat:
// the same step again, each Heartbeat), so a client that resets its timeout on
// progress keeps waiting; and a wait whose intent is deleted ends saying so, instead
// of waiting out its time for an observation that will never come.
func TestMCPWaitHeartbeatAndDeletedIntent(t *testing.T) {
	e := startMCP(t)
	reviewer, err := kubernetes.NewForConfig(configs[controllerUser])
	if err != nil {
		t.Fatal(err)
	}
	s := &mcpserver.Server{Config: env.Config, Reviews: reviewer.AuthenticationV1().TokenReviews(), Scheme: env.Scheme, MaxWait: 3 * time.Second, Heartbeat: time.Second}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	url := srv.URL + "/mcp/" + e.ns + "/fix-tests"

	var mu sync.Mutex
	var steps []string
	session, err := e.connectTo(t, url, e.agentToken, func(m string) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// An edit in Edit mode asks a human, and nobody decides it here.
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "held.txt", "content": "held\n"}})
	if err != nil || res.IsError || !strings.HasPrefix(resultText(res), "[still waiting]") {
		t.Fatalf("a call nobody approves: %v %q", err, resultText(res))
	}
	intent := waitForIntent(t, e.ns, `"held.txt"`, func(in *v1.ToolIntent) bool { return in.Status.ApprovalName != "" })

	t.Run("a heartbeat repeats the step while nothing changes", func(t *testing.T) {
		mu.Lock()
		steps = nil
		mu.Unlock()
		params := &mcp.CallToolParams{Name: mcpserver.WaitTool, Arguments: map[string]any{"intentName": intent.Name}}
		params.SetProgressToken("heartbeat")
		res, err := session.CallTool(ctx, params)
		if err != nil || res.IsError || !strings.HasPrefix(resultText(res), "[still waiting]") {
			t.Fatalf("toolgate_wait on a call nobody approves: %v %q", err, resultText(res))
		}
		mu.Lock()
		defer mu.Unlock()
		// The step at once, then at least one heartbeat within the 3 s wait.
		want := "waiting for Approval " + intent.Status.ApprovalName
		if len(steps) < 2 {
			t.Fatalf("progress during a 3 s wait with a 1 s heartbeat: %q; want the step and a heartbeat", steps)
		}
		for _, m := range steps {
			if !strings.HasPrefix(m, want) {
				t.Errorf("progress %q while the call waits; want every one to say %q", m, want)
			}
		}
	})

	t.Run("a wait whose intent is deleted says so", func(t *testing.T) {
		// The main endpoint waits a minute: long past the delete below.
		waiting := make(chan struct{})
		var once sync.Once
		long, err := e.connectTo(t, e.url, e.agentToken, func(string) { once.Do(func() { close(waiting) }) })
		if err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			res *mcp.CallToolResult
			err error
		}
		done := make(chan outcome, 1)
		start := time.Now()
		go func() {
			params := &mcp.CallToolParams{Name: mcpserver.WaitTool, Arguments: map[string]any{"intentName": intent.Name}}
			params.SetProgressToken("deleted")
			res, err := long.CallTool(ctx, params)
			done <- outcome{res, err}
		}()
		// Deleted once the wait has read it (its first progress comes after the
		// read): the watch starts from the version the wait read, so a delete
		// before the watch opens is seen too.
		select {
		case <-waiting:
		case <-time.After(30 * time.Second):
			t.Fatal("toolgate_wait sent no progress")
		}
		if err := env.Client.Delete(context.Background(), intent); err != nil {
			t.Fatal(err)
		}
		var got outcome
		select {
		case got = <-done:
		case <-time.After(45 * time.Second):
			t.Fatal("toolgate_wait went on waiting for a deleted intent")
		}
		text := ""
		if got.res != nil {
			text = resultText(got.res)
		}
		if got.err != nil {
			text = got.err.Error()
		}
		if (got.res != nil && !got.res.IsError) || !strings.Contains(text, "ToolIntent "+intent.Name+" was deleted before toolgate observed it") {
			t.Fatalf("toolgate_wait on a deleted intent, after %s: %v %q; want an error saying it was deleted", time.Since(start), got.err, text)
		}
	})
}
