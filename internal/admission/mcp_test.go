package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mcpserver"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/testenv"
)

// The MCP endpoint, driven by the Go SDK's client over Streamable HTTP, in front of
// the real API server, admission policies and controller. Callers are service
// accounts with real tokens (TokenRequest); the endpoint reviews them as the
// controller's identity and acts with the caller's own token.

// mcpEnv is a namespace with the controller running, a task whose one proposer is
// the service account coding-agent, and the MCP endpoint.
type mcpEnv struct {
	// url is the endpoint; shortURL is one whose calls wait only a second.
	ns, url, shortURL string
	// agentToken is coding-agent's; strangerToken is stranger-agent's, who holds
	// the agent role too but is no proposer.
	agentToken, strangerToken string
	// secondToken is second-agent's, the task's other proposer.
	secondToken string
}

func startMCP(t *testing.T) *mcpEnv {
	t.Helper()
	ns := setupNamespace(t)
	createClaim(t, ns, "ws")
	e := &mcpEnv{ns: ns}
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var agents []rbacv1.Subject
	for _, sa := range []string{"coding-agent", "stranger-agent", "second-agent"} {
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns})
	}
	if err := grant(t.Context(), ns, roleNames["agent"], agents...); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("requesting a token for %s: %v", sa, err)
		}
		waitAllowed(t, ns, "system:serviceaccount:"+ns+":"+sa, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}, "create", "toolintents")
		return tr.Status.Token
	}
	e.agentToken, e.strangerToken, e.secondToken = token("coding-agent"), token("stranger-agent"), token("second-agent")
	createTask(t, ns, "fix-tests", external(v1.Proposers{ServiceAccounts: []v1.ServiceAccountReference{{Namespace: ns, Name: "coding-agent"}, {Namespace: ns, Name: "second-agent"}}}))
	startController(t, ns)
	runJobs(t, ns)

	reviewer, err := kubernetes.NewForConfig(configs[controllerUser])
	if err != nil {
		t.Fatal(err)
	}
	s := &mcpserver.Server{Config: env.Config, Reviews: reviewer.AuthenticationV1().TokenReviews(), Scheme: env.Scheme, MaxWait: time.Minute, Heartbeat: time.Second}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/mcp/" + ns + "/fix-tests"
	short := &mcpserver.Server{Config: env.Config, Reviews: reviewer.AuthenticationV1().TokenReviews(), Scheme: env.Scheme, MaxWait: time.Second, Heartbeat: time.Second}
	shortSrv := httptest.NewServer(short.Handler())
	t.Cleanup(shortSrv.Close)
	e.shortURL = shortSrv.URL + "/mcp/" + ns + "/fix-tests"
	return e
}

// runJobs plays the Job controller and the kubelet for the namespace's tool Jobs:
// each finishes at once with exit code 0, but for a call of "sleep 600", which runs
// until it is aborted.
func runJobs(t *testing.T, ns string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var jobs batchv1.JobList
			if err := env.Client.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
				return false, nil
			}
			for i := range jobs.Items {
				job := &jobs.Items[i]
				intent := &v1.ToolIntent{}
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Labels[v1.LabelIntent]}, intent); err == nil && strings.Contains(string(intent.Spec.Input.Raw), "sleep 600") {
					_ = env.Client.Create(ctx, testenv.JobPod(job, "-pod"))
					continue
				}
				_ = testenv.FinishJobPod(ctx, env.Client, job, runnerImage, sandboxImage)
			}
			return false, nil
		})
	}()
}

// bearer adds a token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// connect opens an MCP session with token; progress notifications go to progress.
func (e *mcpEnv) connect(t *testing.T, token string, progress func(string)) (*mcp.ClientSession, error) {
	t.Helper()
	return e.connectTo(t, e.url, token, progress)
}

func (e *mcpEnv) connectTo(t *testing.T, url, token string, progress func(string)) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "toolgate-test-client", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if progress != nil {
				progress(req.Params.Message)
			}
		},
	})
	session, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err == nil {
		t.Cleanup(func() { _ = session.Close() })
	}
	return session, err
}

func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPEndpoint(t *testing.T) {
	e := startMCP(t)
	ctx := t.Context()

	session, err := e.connect(t, e.agentToken, nil)
	if err != nil {
		t.Fatalf("connecting as the task's proposer: %v", err)
	}

	t.Run("lists the task's visible tools with their schemas, and toolgate_wait", func(t *testing.T) {
		list, err := session.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]*mcp.Tool{}
		for _, tool := range list.Tools {
			names[tool.Name] = tool
		}
		for _, want := range []string{"bash", "read_file", "edit_file", mcpserver.WaitTool} {
			if names[want] == nil {
				t.Errorf("tools/list lacks %s: %v", want, names)
			}
		}
		if names["git_push"] != nil {
			t.Errorf("tools/list offers toolgate's own git_push")
		}
		schema, _ := names["bash"].InputSchema.(map[string]any)
		if props, _ := schema["properties"].(map[string]any); props["command"] == nil {
			t.Errorf("bash's input schema: %v", names["bash"].InputSchema)
		}
	})

	t.Run("an allowed call runs and returns its observation, created as the caller", func(t *testing.T) {
		var mu sync.Mutex
		var steps []string
		s, err := e.connect(t, e.agentToken, func(m string) { mu.Lock(); steps = append(steps, m); mu.Unlock() })
		if err != nil {
			t.Fatal(err)
		}
		params := &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "ls"}}
		params.SetProgressToken("p1")
		res, err := s.CallTool(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || !strings.Contains(resultText(res), "[exit code: 0]") {
			t.Fatalf("result: error %t, %q", res.IsError, resultText(res))
		}
		intent := intentOf(t, res)
		if want := "system:serviceaccount:" + e.ns + ":coding-agent"; intent.Spec.RequestedBy != want || intent.Spec.ProposedBy.Provider != mcpserver.Provider ||
			intent.Annotations[v1.AnnotationSession] == "" || intent.Spec.ProposedBy.Model != "toolgate-test-client" {
			t.Errorf("intent %s: requestedBy %q, proposedBy %+v, annotations %v", intent.Name, intent.Spec.RequestedBy, intent.Spec.ProposedBy, intent.Annotations)
		}
		// The SDK hands notifications to their handler on a goroutine of their own:
		// the last one may still be on its way when the result is returned.
		last := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), steps...) }
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			got := last()
			return len(got) > 0 && got[len(got)-1] == "observed: Succeeded", nil
		}); err != nil {
			t.Errorf("progress notifications: %q; want the last to be \"observed: Succeeded\"", last())
		}
	})

	t.Run("a denied call is an error result that says nothing ran", func(t *testing.T) {
		if err := env.Client.Create(ctx, &v1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "no-network"},
			Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{{Name: "deny-network", Action: v1.RuleDeny, Reason: "no network from here",
				Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryNetwork}}}}}}); err != nil {
			t.Fatal(err)
		}
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "curl https://example.com"}})
		if err != nil {
			t.Fatal(err)
		}
		if text := resultText(res); !res.IsError || !strings.Contains(text, "[not executed]") || !strings.Contains(text, "no network from here") {
			t.Errorf("denied call: error %t, %q", res.IsError, text)
		}
		wantNothingRan(t, intentOf(t, res))
	})

	t.Run("a call that fails validation is an error result naming the field", func(t *testing.T) {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "../../etc/passwd"}})
		if err != nil {
			t.Fatal(err)
		}
		if text := resultText(res); !res.IsError || !strings.Contains(text, "input/path") {
			t.Errorf("invalid call: error %t, %q", res.IsError, text)
		}
	})

	t.Run("an Ask waits while another user approves it with a merge patch, then runs", func(t *testing.T) {
		var mu sync.Mutex
		var steps []string
		// alice approves only once the client was told it waits for the Approval.
		waiting := make(chan struct{})
		var once sync.Once
		s, err := e.connect(t, e.agentToken, func(m string) {
			mu.Lock()
			steps = append(steps, m)
			mu.Unlock()
			if strings.HasPrefix(m, "waiting for Approval ") {
				once.Do(func() { close(waiting) })
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		// alice approves, as kubectl patch approval would, once the Approval exists.
		if err := grant(ctx, e.ns, roleNames["approver"], rbacv1.Subject{Kind: rbacv1.UserKind, Name: alice}); err != nil {
			t.Fatal(err)
		}
		approved := make(chan error, 1)
		go func() {
			select {
			case <-waiting:
			case <-time.After(time.Minute):
				approved <- errors.New("the client was never told the call waits for an Approval")
				return
			}
			approved <- wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				var list v1.ApprovalList
				if err := env.Client.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
					return false, err
				}
				for i := range list.Items {
					if len(list.Items[i].Spec.Votes) == 0 && list.Items[i].Spec.Request.Tool == v1.ToolWriteFile {
						return true, decide(ctx, clients[alice], &list.Items[i], v1.DecisionApproved, alice)
					}
				}
				return false, nil
			})
		}()
		params := &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "notes.txt", "content": "hello\n"}}
		params.SetProgressToken(7)
		res, err := s.CallTool(ctx, params)
		if err := <-approved; err != nil {
			t.Fatalf("approving: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || !strings.Contains(resultText(res), "[exit code: 0]") {
			t.Fatalf("approved write: error %t, %q", res.IsError, resultText(res))
		}
		mu.Lock()
		defer mu.Unlock()
		if !containsPrefix(steps, "waiting for Approval ") {
			t.Errorf("no progress named the Approval: %q", steps)
		}
	})

	t.Run("a call that outlasts its request says it still waits; toolgate_wait picks up its observation, for its proposer only", func(t *testing.T) {
		s, err := e.connectTo(t, e.shortURL, e.agentToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "later.txt", "content": "later\n"}})
		if err != nil {
			t.Fatal(err)
		}
		text := resultText(res)
		if res.IsError || !strings.HasPrefix(text, "[still waiting]") || !strings.Contains(text, mcpserver.WaitTool) {
			t.Fatalf("a call waiting for a human: error %t, %q", res.IsError, text)
		}
		intent := waitForIntent(t, e.ns, `"later.txt"`, func(in *v1.ToolIntent) bool { return in.Status.ApprovalName != "" })
		if !strings.Contains(text, intent.Name) {
			t.Fatalf("the result does not name intent %s: %q", intent.Name, text)
		}
		// Once the Approval exists (the first wait may have ended before the
		// controller got there), a wait says it waits for that Approval.
		res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.WaitTool, Arguments: map[string]any{"intentName": intent.Name}})
		if err != nil {
			t.Fatal(err)
		}
		if text := resultText(res); res.IsError || !strings.HasPrefix(text, "[still waiting]") || !strings.Contains(text, "waiting for Approval "+intent.Status.ApprovalName) {
			t.Fatalf("toolgate_wait on a call waiting for a human: error %t, %q", res.IsError, text)
		}
		// The task's other proposer may not wait on it, nor anyone on a missing intent.
		second, err := e.connectTo(t, e.shortURL, e.secondToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		for intentName, want := range map[string]string{intent.Name: "is not a call you proposed", "no-such-intent": "not found"} {
			other, err := second.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.WaitTool, Arguments: map[string]any{"intentName": intentName}})
			if err != nil || !other.IsError || !strings.Contains(resultText(other), want) {
				t.Errorf("toolgate_wait by another proposer on %s: %v %q; want %q", intentName, err, resultText(other), want)
			}
		}
		// A client that gives up on toolgate_wait leaves the call as it is. The wait
		// watches the intent through a proxy: the client gives up once the watch is
		// open, and the wait has ended once it is closed (what it would do about the
		// client giving up, it does before).
		proxy := newAPIProxy(t)
		watched, err := e.connectTo(t, proxy.endpointBehind(t, e.ns, "fix-tests"), e.agentToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitCtx, giveUp := context.WithCancel(ctx)
		gaveUp := make(chan struct{})
		go func() {
			defer close(gaveUp)
			_, _ = watched.CallTool(waitCtx, &mcp.CallToolParams{Name: mcpserver.WaitTool, Arguments: map[string]any{"intentName": intent.Name}})
		}()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return proxy.watches("toolintents") > 0, nil
		}); err != nil {
			t.Fatal("toolgate_wait never watched the intent")
		}
		giveUp()
		<-gaveUp
		testenv.Absent(t, 30*time.Second, "the wait stopped watching the intent", func() (bool, string) {
			n := proxy.watches("toolintents")
			return n == 0, fmt.Sprintf("%d watches open", n)
		}, "the call withdrawn", func() bool {
			got := waitFor(t, intent, "being read", func(*v1.ToolIntent) bool { return true })
			return got.Spec.Cancel || got.Status.Observation != nil
		})
		approval := &v1.Approval{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: intent.Status.ApprovalName}, approval); err != nil {
			t.Fatal(err)
		}
		if err := decide(ctx, clients[alice], approval, v1.DecisionApproved, alice); err != nil {
			t.Fatalf("approving: %v", err)
		}
		waitFor(t, intent, "an observation", func(i *v1.ToolIntent) bool { return i.Status.Observation != nil })
		res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.WaitTool, Arguments: map[string]any{"intentName": intent.Name}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || !strings.Contains(resultText(res), "[exit code: 0]") {
			t.Errorf("toolgate_wait: error %t, %q", res.IsError, resultText(res))
		}
	})

	t.Run("a client's cancel withdraws a call waiting for approval: nothing runs and the Approval is retired", func(t *testing.T) {
		callCtx, cancel := context.WithCancel(ctx)
		errs := make(chan error, 1)
		go func() {
			_, err := session.CallTool(callCtx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "withdrawn.txt", "content": "no\n"}})
			errs <- err
		}()
		intent := waitForIntent(t, e.ns, `"withdrawn.txt"`, func(in *v1.ToolIntent) bool { return in.Status.ApprovalName != "" })
		cancel()
		if err := <-errs; err == nil {
			t.Errorf("the cancelled call returned no error")
		}
		got := waitFor(t, intent, "an observation", func(i *v1.ToolIntent) bool { return i.Status.Observation != nil })
		if obs := got.Status.Observation; !got.Spec.Cancel || obs.Outcome != v1.OutcomeAborted || obs.Executed {
			t.Fatalf("cancelled intent: cancel %t, observation %+v", got.Spec.Cancel, obs)
		}
		wantNothingRan(t, got)
		approval := &v1.Approval{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: intent.Status.ApprovalName}, approval); err != nil {
			t.Fatal(err)
		}
		if approval.Status.State != v1.ApprovalStateSuperseded {
			t.Errorf("the withdrawn call's Approval is %s; want Superseded (never usable)", approval.Status.State)
		}
	})

	t.Run("a client's cancel aborts a running call", func(t *testing.T) {
		callCtx, cancel := context.WithCancel(ctx)
		errs := make(chan error, 1)
		go func() {
			_, err := session.CallTool(callCtx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep 600"}})
			errs <- err
		}()
		intent := waitForIntent(t, e.ns, "sleep 600", func(in *v1.ToolIntent) bool { return in.Status.ExecutionName != "" })
		// The intent names its Execution before the Execution is authorized and its
		// Job created: a cancel in between withdraws the call before it runs. Cancel
		// once it runs.
		waitJob(t, e.ns, pipeline.ExecutionName(intent))
		cancel()
		if err := <-errs; err == nil {
			t.Errorf("the cancelled call returned no error")
		}
		got := waitFor(t, intent, "an observation", func(i *v1.ToolIntent) bool { return i.Status.Observation != nil })
		if obs := got.Status.Observation; obs.Outcome != v1.OutcomeAborted {
			t.Fatalf("aborted intent: observation %+v", obs)
		}
	})

	t.Run("bad tokens and non-proposers are refused, saying why", func(t *testing.T) {
		for name, tc := range map[string]struct{ token, want string }{
			"no token":       {"", "no bearer token"},
			"a bad token":    {"not-a-token", "the bearer token is not valid for this cluster"},
			"a non-proposer": {e.strangerToken, "system:serviceaccount:" + e.ns + ":stranger-agent may not propose calls for AgentTask " + e.ns + "/fix-tests; its proposers are service accounts " + e.ns + "/coding-agent, " + e.ns + "/second-agent"},
		} {
			_, err := e.connect(t, tc.token, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v; want the refusal to say %q", name, err, tc.want)
			}
		}
	})
}

// waitForIntent waits for the namespace's intent whose input contains input and
// that satisfies cond.
func waitForIntent(t *testing.T, ns, input string, cond func(*v1.ToolIntent) bool) *v1.ToolIntent {
	t.Helper()
	var found *v1.ToolIntent
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var list v1.ToolIntentList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for i := range list.Items {
			if strings.Contains(string(list.Items[i].Spec.Input.Raw), input) && cond(&list.Items[i]) {
				found = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no intent with %s reached the state waited for: %v", input, err)
	}
	return found
}

// intentOf reads the intent a result names (structuredContent.intent).
func intentOf(t *testing.T, res *mcp.CallToolResult) *v1.ToolIntent {
	t.Helper()
	m, _ := res.StructuredContent.(map[string]any)
	name, _ := m["intentName"].(string)
	if name == "" {
		t.Fatalf("the result names no intent: %v", res.StructuredContent)
	}
	var list v1.ToolIntentList
	if err := env.Client.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i]
		}
	}
	t.Fatalf("no intent %s", name)
	return nil
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// countingReviews counts the TokenReviews the endpoint sends to the real API server.
type countingReviews struct {
	authenticationclient.TokenReviewInterface
	mu sync.Mutex
	n  int
}

func (c *countingReviews) Create(ctx context.Context, review *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.TokenReviewInterface.Create(ctx, review, opts)
}

func (c *countingReviews) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// A client sending junk tokens cannot make the endpoint flood the API server with
// TokenReviews, nor lock out the callers already in: a refused token is refused
// again from memory, new tokens are reviewed at a bounded rate, and a token the API
// server accepted is reviewed again when its review is stale without waiting for
// that rate.
func TestMCPEndpointBoundsTokenReviews(t *testing.T) {
	e := startMCP(t)
	reviewer, err := kubernetes.NewForConfig(configs[controllerUser])
	if err != nil {
		t.Fatal(err)
	}
	reviews := &countingReviews{TokenReviewInterface: reviewer.AuthenticationV1().TokenReviews()}
	// Long enough that the requests counted as reusing a review come within it on a
	// slow machine; the flood below outlasts it.
	const reviewTTL = 10 * time.Second
	const reviewRate = 0.1
	s := &mcpserver.Server{Config: env.Config, Reviews: reviews, Scheme: env.Scheme, ReviewRate: reviewRate, ReviewTTL: reviewTTL}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	url := srv.URL + "/mcp/" + e.ns + "/fix-tests"

	status, body, session := rawMCP(t, url, e.agentToken, "", rawInitialize)
	if status != http.StatusOK || session == "" {
		t.Fatalf("the proposer's token: %d %s", status, body)
	}
	if status, body, _ := rawMCP(t, url, e.agentToken, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); status >= 300 {
		t.Fatalf("initialized: %d %s", status, body)
	}
	for range 5 {
		if status, body, _ := rawMCP(t, url, "the-same-junk", "", rawInitialize); status != http.StatusUnauthorized || !strings.Contains(body, "the bearer token is not valid for this cluster") {
			t.Fatalf("a junk token: %d %s; want 401 saying the token is not valid", status, body)
		}
	}
	if n := reviews.count(); n != 2 {
		t.Fatalf("%d TokenReviews for the proposer's token and one junk token sent five times; want 2", n)
	}

	// New junk on every request, for longer than a review is reused: past the
	// burst, refused without a review.
	limited, junk := 0, 0
	flood := func(n int) {
		for range n {
			junk++
			status, body, _ := rawMCP(t, url, fmt.Sprintf("junk-%d", junk), "", rawInitialize)
			switch {
			case status == http.StatusTooManyRequests && strings.Contains(body, "too many new tokens"):
				limited++
			case status != http.StatusUnauthorized:
				t.Fatalf("junk token %d: %d %s", junk, status, body)
			}
		}
	}
	floodStart := time.Now()
	flood(80)
	for deadline := time.Now().Add(reviewTTL + time.Second); time.Now().Before(deadline); {
		flood(2)
		time.Sleep(100 * time.Millisecond)
	}
	// The burst, and what the rate let through while the flood lasted.
	if n, bound := reviews.count(), 2+50+int(reviewRate*time.Since(floodStart).Seconds())+1; limited == 0 || n > bound {
		t.Fatalf("%d new junk tokens: %d limited, %d TokenReviews in all; want at most %d (the burst and the rate)", junk, limited, n, bound)
	}
	before := reviews.count()
	const list = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if status, body, _ := rawMCP(t, url, e.agentToken, session, list); status != http.StatusOK {
		t.Fatalf("the proposer's open session during the flood, its review stale: %d %s", status, body)
	}
	if n := reviews.count(); n != before+1 {
		t.Fatalf("the proposer's stale review: %d → %d TokenReviews; want it reviewed again, once", before, n)
	}
	if status, body, _ := rawMCP(t, url, e.agentToken, session, list); status != http.StatusOK || reviews.count() != before+1 {
		t.Fatalf("the proposer's fresh review: %d %s, %d TokenReviews; want it reused", status, body, reviews.count())
	}
}
