package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
	"github.com/toolgate/toolgate/internal/transcript"
)

// ---- Scripts for the Chat Completions endpoint (fixtures.ChatServer), spoken to by the real SDK ----

// chatCall is a tool call the fake model proposes.
type chatCall struct{ id, name, args string }

// toolCalls is a reply proposing calls, with the assistant's text and a usage.
func toolCalls(text string, tokens int64, calls ...chatCall) fixtures.ChatReply {
	var tcs []map[string]any
	for _, c := range calls {
		tcs = append(tcs, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
	}
	return modelCompletion(text, "tool_calls", tokens, tcs)
}

// answer is a final reply without tool calls.
func answer(text string, tokens int64) fixtures.ChatReply {
	return modelCompletion(text, "stop", tokens, nil)
}

func modelCompletion(text, finish string, tokens int64, calls []map[string]any) fixtures.ChatReply {
	msg := map[string]any{"role": "assistant", "content": text}
	if calls != nil {
		msg["tool_calls"] = calls
	}
	body, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": "test-model-2025",
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": msg}},
		"usage":   map[string]any{"prompt_tokens": tokens - tokens/4, "completion_tokens": tokens / 4, "total_tokens": tokens},
	})
	return fixtures.ChatReply{Status: http.StatusOK, Body: string(body)}
}

// failure is an error answer in OpenAI's shape.
func modelFailure(status int, message string) fixtures.ChatReply {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": "test_error"}})
	return fixtures.ChatReply{Status: status, Body: string(body)}
}

// withHeader is the reply with one more response header.
func withHeader(reply fixtures.ChatReply, key, value string) fixtures.ChatReply {
	h := map[string]string{key: value}
	for k, v := range reply.Header {
		h[k] = v
	}
	reply.Header = h
	return reply
}

// text decodes a message content: a string, or the text parts of an array.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct{ Text string }
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// wantMessage is one expected message of a request; calls are "id name arguments".
type wantMessage struct {
	role, content, toolCallID string
	calls                     []string
}

// expectMessages checks a request's conversation message by message.
func expectMessages(t *testing.T, what string, got fixtures.ChatRequest, want []wantMessage) {
	t.Helper()
	if len(got.Messages) != len(want) {
		t.Fatalf("%s: %d messages, want %d: %+v", what, len(got.Messages), len(want), got.Messages)
	}
	for i, w := range want {
		m := got.Messages[i]
		var calls []string
		for _, c := range m.ToolCalls {
			calls = append(calls, c.ID+" "+c.Function.Name+" "+c.Function.Arguments)
		}
		if m.Role != w.role || contentText(m.Content) != w.content || m.ToolCallID != w.toolCallID || !slices.Equal(calls, w.calls) {
			t.Errorf("%s: message %d is\n  %s %q tool_call_id=%q calls=%q\nwant\n  %s %q tool_call_id=%q calls=%q",
				what, i, m.Role, contentText(m.Content), m.ToolCallID, calls, w.role, w.content, w.toolCallID, w.calls)
		}
	}
}

// ---- The controller with a model ----

// loopEnv is the whole controller run against the shared control plane, with the
// model client made by the real SDK and a sleep that records its waits instead of
// waiting.
type loopEnv struct {
	*pipelineEnv
	mu     sync.Mutex
	sleeps []time.Duration
	// endpoints, when set, is the controller's model endpoint allow-list.
	endpoints agent.Endpoints
	// mgr is the manager start started last.
	mgr ctrl.Manager
}

func newLoopEnv(t *testing.T) *loopEnv {
	return &loopEnv{pipelineEnv: &pipelineEnv{t: t, ns: env.Namespace(t), logs: &podLogs{}, clock: &fixtures.Clock{}}}
}

// startLoop starts a manager with every reconciler; stop ends it (also at cleanup).
func (p *loopEnv) start() (stop func()) {
	t := p.t
	t.Helper()
	// The cache of cmd/manager: only labelled Secrets are visible.
	mgr := newTestManager(t, p.ns)
	p.mgr = mgr
	opts := testOptions()
	opts.Now = p.clock.Now
	opts.ModelEndpoints = p.endpoints
	tasks, err := newAgentTaskReconciler(mgr, opts)
	if err != nil {
		t.Fatal(err)
	}
	tasks.NewModel = func(cfg agent.ClientConfig) (agent.Model, error) {
		cfg.MaxAttempts = 2
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.sleeps = append(p.sleeps, d)
			return ctx.Err()
		}
		return NewModelClient(cfg)
	}
	tasks.ModelRetryDelay = time.Second
	for _, setup := range []func() error{
		func() error { return setupIndexes(mgr, opts) },
		func() error { return tasks.SetupWithManager(mgr) },
		func() error { return setupToolIntent(mgr, opts) },
		func() error { return setupApproval(mgr, opts) },
		func() error { return setupPolicies(mgr, opts) },
		func() error {
			r, err := newExecutionReconciler(mgr, opts)
			if err != nil {
				return err
			}
			r.Logs = p.logs
			return r.SetupWithManager(mgr)
		},
	} {
		if err := setup(); err != nil {
			t.Fatalf("setting up controller: %v", err)
		}
	}
	return testenv.RunManager(t, mgr)
}

const testAPIKey = "sk-test-0123456789abcdefghij"

// modelTask creates the API key Secret, labelled as a model credential, and a model
// task talking to server. A Secret of that name created before is kept as it is.
func (p *loopEnv) modelTask(name string, mode v1.TaskMode, server *fixtures.ChatServer, mutate ...func(*v1.AgentTask)) *v1.AgentTask {
	p.t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name + "-key", Labels: map[string]string{v1.LabelModelCredentials: v1.ModelCredentialsValue}},
		// Written from a file, with its newline.
		Data: map[string][]byte{"apiKey": []byte(testAPIKey + "\n")},
	}
	if err := env.Client.Create(context.Background(), secret); err != nil && !apierrors.IsAlreadyExists(err) {
		p.t.Fatal(err)
	}
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name},
		Spec: v1.AgentTaskSpec{
			Goal:      "The tests of this project fail. Find out why and fix the code.",
			Mode:      mode,
			Workspace: v1.WorkspaceSpec{VolumeClaim: &v1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")}},
			Agent: v1.AgentSpec{Model: &v1.ModelAgent{
				BaseURL: server.BaseURL(), Model: "test-model",
				APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name + "-key"}, Key: "apiKey"},
			}},
		},
	}
	for _, m := range mutate {
		m(task)
	}
	if err := env.Client.Create(context.Background(), task); err != nil {
		p.t.Fatalf("creating task: %v", err)
	}
	return task
}

// finished waits for the task's terminal condition and returns the task.
func (p *pipelineEnv) finished(name, typ, reason string) *v1.AgentTask {
	p.t.Helper()
	var task *v1.AgentTask
	p.eventually(fmt.Sprintf("task %s %s/%s", name, typ, reason), func() (bool, string) {
		task = p.getTask(name)
		c := meta.FindStatusCondition(task.Status.Conditions, typ)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason, fmt.Sprintf("%+v", task.Status)
	})
	return task
}

// intentNames lists the names of the namespace's intents, sorted.
func (p *loopEnv) intentNames() []string {
	p.t.Helper()
	list := &v1.ToolIntentList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(p.ns)); err != nil {
		p.t.Fatal(err)
	}
	var out []string
	for _, in := range list.Items {
		out = append(out, in.Name)
	}
	slices.Sort(out)
	return out
}

// record reads a turn record.
func (p *loopEnv) record(task string, turn int32) (*corev1.ConfigMap, agent.TurnRecord) {
	p.t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: transcript.TurnRecordName(task, turn)}, cm); err != nil {
		p.t.Fatalf("turn record %d: %v", turn, err)
	}
	rec, err := agent.ParseTurnRecord([]byte(cm.Data[transcript.TurnRecordKey]))
	if err != nil {
		p.t.Fatal(err)
	}
	return cm, rec
}

func (p *loopEnv) waitRequests(server *fixtures.ChatServer, n int) []fixtures.ChatRequest {
	p.t.Helper()
	p.eventually(fmt.Sprintf("%d model requests", n), func() (bool, string) {
		return len(server.Received()) >= n, fmt.Sprint(len(server.Received()))
	})
	return server.Received()
}

// exists waits until the intent exists.
func (p *loopEnv) exists(name string) {
	p.t.Helper()
	p.eventually("intent "+name, func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, &v1.ToolIntent{})
		return err == nil, fmt.Sprint(err)
	})
}

func (p *loopEnv) summary(intent string) string {
	p.t.Helper()
	return p.observed(intent).Status.Observation.Summary
}

var (
	readOnlyTools = []string{"bash", "glob", "grep", "list_dir", "read_file"}
	allTools      = []string{"bash", "edit_file", "glob", "grep", "list_dir", "read_file", "write_file"}
)

// TestAgentLoopFixesTheFailingTest is the seed story driven by a model over five
// turns: run the tests (exit 1), read the file, edit it (the policy asks; bob
// approves by merge patch), run the tests (exit 0), answer. Every request's
// conversation is checked message by message, and every record and intent.
func TestAgentLoopFixesTheFailingTest(t *testing.T) {
	p := newLoopEnv(t)
	p.start()
	p.policy("project",
		v1.PolicyRule{Name: "allow-tests", Action: v1.RuleAllow, Reason: "running the tests is safe",
			Match: v1.RuleMatch{Tools: []v1.ToolName{v1.ToolBash}, Categories: []v1.CommandCategory{v1.CategoryTest}}},
		v1.PolicyRule{Name: "ask-edits", Action: v1.RuleAsk, Reason: "code changes need review", Risk: v1.RiskMedium,
			Match: v1.RuleMatch{Tools: []v1.ToolName{v1.ToolEditFile, v1.ToolWriteFile}}, Approvers: v1.Approvers{Users: []string{"bob"}}},
		v1.PolicyRule{Name: "deny-destructive", Action: v1.RuleDeny, Reason: "destructive commands are never run",
			Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryDelete, v1.CategoryVCSDestructive}}},
	)
	const (
		text0 = "Let me run the tests first."
		args0 = `{"command":"go test ./...","description":"run the tests"}`
		text1 = "TestAdd fails; I will read add.go."
		args1 = `{"path":"add.go"}`
		text2 = "Add adds one too many. Fixing it."
		args2 = `{"path":"add.go","oldText":"return a + b + 1","newText":"return a + b"}`
		text3 = "Running the tests again."
		args3 = `{"command":"go test ./..."}`
		final = "Add returned a + b + 1. I changed it to return a + b, and go test ./... now passes."
	)
	server := fixtures.NewChatServer(t,
		toolCalls(text0, 100, chatCall{"call_run1", "bash", args0}),
		toolCalls(text1, 200, chatCall{"call_read", "read_file", args1}),
		toolCalls(text2, 300, chatCall{"call_edit", "edit_file", args2}),
		toolCalls(text3, 400, chatCall{"call_run2", "bash", args3}),
		answer(final, 500),
	)
	p.modelTask("fix", v1.ModeEdit, server)

	p.runJob("fix-t0-0", protocol.Result{ExitCode: 1, ErrorKind: protocol.KindExitCode}, "--- FAIL: TestAdd\n    add_test.go:9: Add(2, 2) = 5, want 4\nFAIL\n")
	expectObservation(t, p.observed("fix-t0-0"), v1.OutcomeFailed, true, 1, "[exit code: 1]")
	p.runJob("fix-t1-0", protocol.Result{ExitCode: 0, ContentSHA256: "sha-before"}, "     1\tpackage add\n     2\tfunc Add(a, b int) int { return a + b + 1 }\n")
	expectObservation(t, p.observed("fix-t1-0"), v1.OutcomeSucceeded, true, 0)

	a := p.approval("fix-t2-0")
	if a.Spec.RequestedBy != DefaultControllerIdentity || a.Spec.Request.PolicyRuleRef.Rule != "ask-edits" {
		t.Fatalf("approval: %+v", a.Spec)
	}
	p.eventually("task awaits approval", func() (bool, string) {
		task := p.getTask("fix")
		return task.Status.Phase == v1.TaskAwaitingApproval, string(task.Status.Phase)
	})
	p.decide("fix-t2-0", v1.DecisionApproved, "bob", "looks right")
	p.runJob("fix-t2-0", protocol.Result{ExitCode: 0, ContentSHA256: "sha-after", LinesAdded: 1, LinesRemoved: 1}, "-\treturn a + b + 1\n+\treturn a + b\n")
	expectObservation(t, p.observed("fix-t2-0"), v1.OutcomeSucceeded, true, 0)
	p.runJob("fix-t3-0", protocol.Result{ExitCode: 0}, "ok  \texample.com/add\t0.01s\n")
	expectObservation(t, p.observed("fix-t3-0"), v1.OutcomeSucceeded, true, 0)

	task := p.finished("fix", v1.ConditionSucceeded, v1.ReasonCompleted)
	if task.Status.Result != final || task.Status.Phase != v1.TaskSucceeded || task.Status.Turn != 4 || task.Status.TokensUsed != 1500 {
		t.Fatalf("status: result %q phase %s turn %d tokens %d", task.Status.Result, task.Status.Phase, task.Status.Turn, task.Status.TokensUsed)
	}
	if got := p.intentNames(); !slices.Equal(got, []string{"fix-t0-0", "fix-t1-0", "fix-t2-0", "fix-t3-0"}) {
		t.Fatalf("intents: %v", got)
	}

	// The conversation of every request, rebuilt from the cluster alone.
	reqs := server.Received()
	if len(reqs) != 5 || server.Unserved() != 0 {
		t.Fatalf("%d model requests, %d replies unused; want 5 and 0", len(reqs), server.Unserved())
	}
	history := []wantMessage{{role: "system", content: agent.SystemPrompt}, {role: "user", content: task.Spec.Goal}}
	turns := []struct{ text, id, tool, args, intent string }{
		{text0, "call_run1", "bash", args0, "fix-t0-0"},
		{text1, "call_read", "read_file", args1, "fix-t1-0"},
		{text2, "call_edit", "edit_file", args2, "fix-t2-0"},
		{text3, "call_run2", "bash", args3, "fix-t3-0"},
	}
	for i, req := range reqs {
		what := fmt.Sprintf("request %d", i)
		expectMessages(t, what, req, history)
		if req.Model != "test-model" || req.Authorization != "Bearer "+testAPIKey {
			t.Errorf("%s: model %q, authorization %q", what, req.Model, req.Authorization)
		}
		if !slices.Equal(req.ToolNames(), allTools) {
			t.Errorf("%s: tools %v, want every tool in Edit mode", what, req.ToolNames())
		}
		if i < len(turns) {
			tt := turns[i]
			history = append(history,
				wantMessage{role: "assistant", content: tt.text, calls: []string{tt.id + " " + tt.tool + " " + tt.args}},
				wantMessage{role: "tool", toolCallID: tt.id, content: p.summary(tt.intent)})
		}
	}
	mustContain(t, "the failing run's result in request 1", contentText(reqs[1].Messages[3].Content), "[exit code: 1]", "Add(2, 2) = 5, want 4")

	// Each intent says who created it and for which call; each turn is recorded.
	for i, tt := range turns {
		in := p.getIntent(tt.intent)
		if in.Spec.RequestedBy != DefaultControllerIdentity || in.Spec.ProposedBy.ToolCallID != tt.id ||
			in.Spec.ProposedBy.Model != "test-model-2025" || in.Spec.ProposedBy.Provider != "127.0.0.1" ||
			in.Spec.Turn != int32(i) || in.Spec.Reason != tt.text || string(in.Spec.Tool) != tt.tool ||
			!metav1.IsControlledBy(in, task) || in.Labels["toolgate.dev/turn"] != fmt.Sprint(i) {
			t.Errorf("intent %s: %+v %+v", in.Name, in.Spec, in.ObjectMeta)
		}
		assertJSON(t, in.Name+" input", in.Spec.Input.Raw, tt.args)
	}
	for i := range int32(5) {
		cm, rec := p.record("fix", i)
		if !metav1.IsControlledBy(cm, task) || cm.Immutable == nil || !*cm.Immutable || cm.Labels["toolgate.dev/task"] != "fix" || rec.Turn != i || rec.Usage.TotalTokens != int64(i+1)*100 {
			t.Errorf("record %d: %+v %+v", i, cm.ObjectMeta, rec)
		}
	}
}

// TestAgentLoopDeniedCallChangesCourse: in ReadOnly mode the model sees only the
// read-only tools; a destructive call is denied, the model is told so, and it reads
// instead.
func TestAgentLoopDeniedCallChangesCourse(t *testing.T) {
	p := newLoopEnv(t)
	p.start()
	p.policy("project", v1.PolicyRule{Name: "deny-destructive", Action: v1.RuleDeny, Reason: "destructive commands are never run",
		Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryDelete}}})
	server := fixtures.NewChatServer(t,
		toolCalls("Clean the build first.", 10, chatCall{"c1", "bash", `{"command":"rm -rf build"}`}),
		toolCalls("Deleting is not allowed; I will look instead.", 10, chatCall{"c2", "bash", `{"command":"ls build"}`}),
		answer("The build directory holds stale objects; I could not delete them.", 10),
	)
	p.modelTask("ro", v1.ModeReadOnly, server)

	p.exists("ro-t0-0")
	deny := p.observed("ro-t0-0")
	expectObservation(t, deny, v1.OutcomeDenied, false, -1, "Nothing was run")
	p.runJob("ro-t1-0", protocol.Result{ExitCode: 0}, "main.o\n")
	p.finished("ro", v1.ConditionSucceeded, v1.ReasonCompleted)

	reqs := server.Received()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	for i, req := range reqs {
		if !slices.Equal(req.ToolNames(), readOnlyTools) {
			t.Errorf("request %d: tools %v, want the read-only ones %v", i, req.ToolNames(), readOnlyTools)
		}
	}
	denial := reqs[1].Messages[3]
	if denial.Role != "tool" || denial.ToolCallID != "c1" || contentText(denial.Content) != deny.Status.Observation.Summary {
		t.Fatalf("request 1 does not carry the denial as the result of c1: %+v", denial)
	}
	mustContain(t, "the denial the model sees", contentText(denial.Content), "Nothing was run", "Policy denied the call")
}

// TestAgentLoopValidationErrorsFedBack: calls that fail validation (a path out of the
// workspace, arguments that are not JSON, a tool that does not exist, a tool outside
// the allow-list) become observations the model sees, in the order of its calls.
func TestAgentLoopValidationErrorsFedBack(t *testing.T) {
	p := newLoopEnv(t)
	p.start()
	server := fixtures.NewChatServer(t,
		toolCalls("", 10,
			chatCall{"a", "read_file", `{"path":"../../etc/passwd"}`},
			chatCall{"b", "bash", `go test ./...`},
			chatCall{"c", "Delete-Everything", `{}`},
			chatCall{"d", "grep", `{"pattern":"x"}`},
		),
		answer("I could not read anything.", 10),
	)
	p.modelTask("v", v1.ModeReadOnly, server, func(task *v1.AgentTask) {
		task.Spec.Tools = []v1.ToolName{v1.ToolReadFile, v1.ToolBash}
	})
	p.finished("v", v1.ConditionSucceeded, v1.ReasonCompleted)

	wantErrors := map[string][]string{
		"v-t0-0": {"../../etc/passwd"},
		"v-t0-1": {transcript.InvalidArgumentsKey},
		"v-t0-2": {`unknown tool "invalid_delete_everything"`},
		"v-t0-3": {`"grep" is not available to this task`},
	}
	reqs := server.Received()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if !slices.Equal(reqs[0].ToolNames(), []string{"bash", "read_file"}) {
		t.Errorf("tools %v, want the allow-list", reqs[0].ToolNames())
	}
	msgs := reqs[1].Messages
	if len(msgs) != 7 || len(msgs[2].ToolCalls) != 4 {
		t.Fatalf("request 1: %+v", msgs)
	}
	for i, id := range []string{"a", "b", "c", "d"} {
		name := fmt.Sprintf("v-t0-%d", i)
		p.exists(name)
		intent := p.observed(name)
		expectObservation(t, intent, v1.OutcomeValidationFailed, false, -1, wantErrors[name]...)
		if msgs[3+i].ToolCallID != id || contentText(msgs[3+i].Content) != intent.Status.Observation.Summary {
			t.Errorf("tool message %d: %+v, want the observation of %s", i, msgs[3+i], name)
		}
	}
	assertJSON(t, "wrapped arguments", p.getIntent("v-t0-1").Spec.Input.Raw, `{"`+transcript.InvalidArgumentsKey+`":"go test ./..."}`)
	mustContain(t, "reason of the made-up tool", p.getIntent("v-t0-2").Spec.Reason, `"Delete-Everything"`)
}

// TestAgentLoopRestart: a controller that stopped after recording a turn but before
// creating its intents, and one that stopped while a turn's call was in flight. The
// next controller neither asks the model again for a recorded turn nor duplicates an
// intent.
func TestAgentLoopRestart(t *testing.T) {
	p := newLoopEnv(t)
	server := fixtures.NewChatServer(t,
		toolCalls("Now list everything.", 10, chatCall{"c1", "bash", `{"command":"ls -la"}`}),
		answer("All tests pass.", 10),
	)
	// Created with no controller running; turn 0 is recorded as a stopped controller
	// left it: the reply is in the cluster, its intent is not.
	task := p.modelTask("r", v1.ModeEdit, server)
	rec := agent.TurnRecord{Turn: 0, Model: "test-model-2025", Text: "Look around first.", FinishReason: "tool_calls",
		ToolCalls: []agent.ToolCall{{ID: "c0", Name: "list_dir", Arguments: `{"path":"."}`}}, Usage: agent.Usage{TotalTokens: 7}}
	data, _ := rec.Marshal()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: transcript.TurnRecordName("r", 0),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}},
		Data: map[string]string{transcript.TurnRecordKey: string(data)},
	}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}

	stop := p.start()
	p.exists("r-t0-0")
	intent := p.condition("r-t0-0", v1.ConditionDecided, metav1.ConditionTrue, v1.ReasonPolicyAllow)
	if intent.Spec.ProposedBy.ToolCallID != "c0" || intent.Spec.Reason != rec.Text {
		t.Fatalf("repaired intent: %+v", intent.Spec)
	}
	// The reconcile that created the intent from the turn record is the one that
	// would otherwise have asked the model.
	absent(t, moment{name: "intent r-t0-0 made from the turn record", passed: func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: "r-t0-0"}, &v1.ToolIntent{})
		return err == nil, fmt.Sprint(err)
	}}, "a model call for the recorded turn", func() bool { return len(server.Received()) > 0 })
	p.runJob("r-t0-0", protocol.Result{ExitCode: 0}, "add.go\nadd_test.go\n")
	p.waitRequests(server, 1)
	p.exists("r-t1-0")
	p.condition("r-t1-0", v1.ConditionDecided, metav1.ConditionTrue, v1.ReasonPolicyAllow)

	// Stop while turn 1's call runs; a new controller takes over.
	stop()
	p.start()
	p.absent(p.reconciledNow("agenttask", p.getTask("r")), "a second model call for turn 1", func() bool { return len(server.Received()) > 1 })
	p.runJob("r-t1-0", protocol.Result{ExitCode: 0}, "ok\n")
	got := p.finished("r", v1.ConditionSucceeded, v1.ReasonCompleted)
	if got.Status.Result != "All tests pass." || got.Status.TokensUsed != 27 {
		t.Fatalf("status: %+v", got.Status)
	}
	if names := p.intentNames(); !slices.Equal(names, []string{"r-t0-0", "r-t1-0"}) {
		t.Fatalf("intents: %v", names)
	}
	reqs := server.Received()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	expectMessages(t, "request for turn 1", reqs[0], []wantMessage{
		{role: "system", content: agent.SystemPrompt},
		{role: "user", content: task.Spec.Goal},
		{role: "assistant", content: rec.Text, calls: []string{`c0 list_dir {"path":"."}`}},
		{role: "tool", toolCallID: "c0", content: p.summary("r-t0-0")},
	})
}

// TestAgentLoopRefusesATurnRecordOfAnotherVersion: a turn record in a format this
// controller does not read (written by a newer toolgate) is not misread as the
// model's turn: the task waits, naming the record and what to do, no intent is
// made from it and the model is not asked in its place.
func TestAgentLoopRefusesATurnRecordOfAnotherVersion(t *testing.T) {
	p := newLoopEnv(t)
	server := fixtures.NewChatServer(t, answer("Done.", 10))
	task := p.modelTask("v", v1.ModeEdit, server)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: transcript.TurnRecordName("v", 0),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}},
		Data: map[string]string{transcript.TurnRecordKey: `{"apiVersion":"turnrecord.toolgate.dev/v2","turn":0,"toolCalls":[{"id":"c0","name":"bash","arguments":"{\"command\":\"ls\"}"}]}`},
	}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}

	p.start()
	var condition *metav1.Condition
	p.eventually("the task waits on the record of another version", func() (bool, string) {
		condition = meta.FindStatusCondition(p.getTask("v").Status.Conditions, v1.ConditionReady)
		return condition != nil && condition.Reason == v1.ReasonModelUnavailable, fmt.Sprintf("%+v", condition)
	})
	mustContain(t, "Ready message", condition.Message,
		`ConfigMap v-turn-0, the record of turn 0, cannot be read: turn record apiVersion "turnrecord.toolgate.dev/v2" is not one this toolgate reads (it reads turnrecord.toolgate.dev/v1)`,
		"delete the AgentTask and create it again")
	// The condition is written by the reconcile that read the record, which is the
	// one that would otherwise have made its intent or asked the model.
	if n := len(server.Received()); n != 0 {
		t.Errorf("the model was asked %d times in place of the refused record", n)
	}
	if names := p.intentNames(); len(names) != 0 {
		t.Errorf("intents made from the refused record: %v", names)
	}
}

// TestAgentLoopProviderErrors: a rejected key fails the task with the provider's
// message (the key masked); a rate limit and a server error are retried by the
// client; a rate limit that outlasts the retries makes the task wait (Ready=False)
// and try again later.
func TestAgentLoopProviderErrors(t *testing.T) {
	p := newLoopEnv(t)
	p.start()

	unauthorized := fixtures.NewChatServer(t, modelFailure(http.StatusUnauthorized, "Incorrect API key provided: "+testAPIKey+". Find your key in your account."))
	p.modelTask("unauthorized", v1.ModeReadOnly, unauthorized)

	limited := fixtures.NewChatServer(t,
		modelFailure(http.StatusTooManyRequests, "Rate limit reached"),
		toolCalls("", 10, chatCall{"c", "list_dir", `{}`}),
		modelFailure(http.StatusTooManyRequests, "Rate limit reached for requests"),
		// The client's last attempt: its Retry-After keeps the task waiting (Ready=False)
		// long enough for a slow poll to see it.
		withHeader(modelFailure(http.StatusTooManyRequests, "Rate limit reached for requests"), "Retry-After", "5"),
		answer("done", 10),
	)
	p.modelTask("limited", v1.ModeReadOnly, limited)

	broken := fixtures.NewChatServer(t, modelFailure(http.StatusInternalServerError, "upstream crashed"), answer("fine now", 10))
	p.modelTask("broken", v1.ModeReadOnly, broken)

	// A task applied before its key Secret waits, naming the Secret, and goes on
	// once the Secret exists.
	keyless := fixtures.NewChatServer(t, answer("late but fine", 10))
	p.modelTask("keyless", v1.ModeReadOnly, keyless, func(task *v1.AgentTask) { task.Spec.Agent.Model.APIKeySecretRef.Name = "applied-later" })
	p.eventually("keyless waits for its Secret", func() (bool, string) {
		task := p.getTask("keyless")
		c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1.ReasonModelUnavailable && task.Status.Phase == v1.TaskPending &&
			strings.Contains(c.Message, `Secret "applied-later" named by spec.agent.model.apiKeySecretRef does not exist`), fmt.Sprintf("%+v", c)
	})
	if n := len(keyless.Received()); n != 0 {
		t.Fatalf("%d model requests without a key", n)
	}
	later := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "applied-later", Labels: map[string]string{v1.LabelModelCredentials: v1.ModelCredentialsValue}}, StringData: map[string]string{"apiKey": "sk-later-0123456789"}}
	if err := env.Client.Create(context.Background(), later); err != nil {
		t.Fatal(err)
	}
	p.finished("keyless", v1.ConditionSucceeded, v1.ReasonCompleted)
	if got := keyless.Received(); len(got) != 1 || got[0].Authorization != "Bearer sk-later-0123456789" {
		t.Fatalf("requests after the Secret appeared: %+v", got)
	}

	task := p.finished("unauthorized", v1.ConditionFailed, v1.ReasonModelError)
	c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed)
	mustContain(t, "401 message", c.Message, "HTTP 401", "Incorrect API key provided", "[MASKED]")
	mustNotContain(t, "401 message", c.Message, testAPIKey, "0123456789abcdef")
	if task.Status.Phase != v1.TaskFailed || len(unauthorized.Received()) != 1 {
		t.Fatalf("phase %s after %d requests; a 401 is not retried", task.Status.Phase, len(unauthorized.Received()))
	}

	p.waitRequests(broken, 2)
	if got := p.finished("broken", v1.ConditionSucceeded, v1.ReasonCompleted); got.Status.Result != "fine now" {
		t.Fatalf("result %q", got.Status.Result)
	}

	// Turn 0 succeeded on the client's retry.
	p.runJob("limited-t0-0", protocol.Result{ExitCode: 0}, "a.go\n")
	p.eventually("limited waits for the model", func() (bool, string) {
		c := meta.FindStatusCondition(p.getTask("limited").Status.Conditions, v1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1.ReasonModelUnavailable &&
			strings.Contains(c.Message, "HTTP 429") && strings.Contains(c.Message, "Rate limit reached for requests"), fmt.Sprintf("%+v", c)
	})
	if got := p.finished("limited", v1.ConditionSucceeded, v1.ReasonCompleted); got.Status.Result != "done" {
		t.Fatalf("result %q", got.Status.Result)
	}
	if n := len(limited.Received()); n != 5 {
		t.Fatalf("%d requests to the rate-limited endpoint, want 5", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sleeps) < 3 {
		t.Fatalf("the client waited %d times between attempts, want at least 3 (429, 429, 500)", len(p.sleeps))
	}
}

// TestAgentLoopBudgets: maxTurns and maxTokens end the task with their own reason
// once the turn that spent them is observed, without asking the model again.
func TestAgentLoopBudgets(t *testing.T) {
	p := newLoopEnv(t)
	p.start()
	// Reads out of the workspace fail validation at once: no Job to play.
	step := func(id string, tokens int64) fixtures.ChatReply {
		return toolCalls("", tokens, chatCall{id, "read_file", `{"path":"../` + id + `"}`})
	}
	turns := fixtures.NewChatServer(t, step("a", 10), step("b", 10))
	p.modelTask("turns", v1.ModeReadOnly, turns, func(task *v1.AgentTask) { task.Spec.Budgets.MaxTurns = 2 })
	tokens := fixtures.NewChatServer(t, step("a", 60), step("b", 60))
	p.modelTask("tokens", v1.ModeReadOnly, tokens, func(task *v1.AgentTask) { task.Spec.Budgets.MaxTokens = ptr.To[int64](100) })

	task := p.finished("turns", v1.ConditionFailed, v1.ReasonTurnBudgetExhausted)
	mustContain(t, "turn budget message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed).Message, "budgets.maxTurns")
	if task.Status.Turn != 1 || len(turns.Received()) != 2 {
		t.Fatalf("turn %d after %d requests, want 1 after 2", task.Status.Turn, len(turns.Received()))
	}
	task = p.finished("tokens", v1.ConditionFailed, v1.ReasonTokenBudgetExhausted)
	if task.Status.TokensUsed != 120 || len(tokens.Received()) != 2 {
		t.Fatalf("tokens %d after %d requests, want 120 after 2", task.Status.TokensUsed, len(tokens.Received()))
	}
	// A task that ended calls the model no more: its end was written by the
	// reconcile that would have called it.
	p.absent(all(p.reconciledNow("agenttask", p.getTask("turns")), p.reconciledNow("agenttask", p.getTask("tokens"))),
		"another model call", func() bool { return len(turns.Received()) > 2 || len(tokens.Received()) > 2 })
}

// assertJSON compares two JSON documents by value.
func assertJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: not JSON: %s", what, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("%s: %s, want %s", what, gb, wb)
	}
}

// ---- Pure parts of the loop ----

func TestNumberCalls(t *testing.T) {
	calls := []agent.ToolCall{{ID: "a"}, {ID: ""}, {ID: "a"}, {ID: "b"}}
	numberCalls(3, calls)
	var ids []string
	for _, c := range calls {
		ids = append(ids, c.ID)
	}
	if want := []string{"a", "toolgate_call_3_1", "toolgate_call_3_2", "b"}; !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v", ids, want)
	}
}

func TestLoopStateOf(t *testing.T) {
	const me = "controller"
	task := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t", UID: "uid"},
		Spec: v1.AgentTaskSpec{Agent: v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: "http://m/v1"}}}}
	call := func(id string) agent.ToolCall {
		return agent.ToolCall{ID: id, Name: "bash", Arguments: `{"command":"ls"}`}
	}
	turn := func(n int32, tokens int64, calls ...agent.ToolCall) agent.TurnRecord {
		return agent.TurnRecord{Turn: n, Text: fmt.Sprint("turn ", n), ToolCalls: calls, Usage: agent.Usage{TotalTokens: tokens}, FinishReason: "tool_calls"}
	}
	intentOf := func(rec agent.TurnRecord, i int, summary string) v1.ToolIntent {
		in := *transcript.ModelIntent(task, rec, i, me)
		if summary != "" {
			in.Status.Observation = &v1.Observation{Outcome: v1.OutcomeSucceeded, Summary: summary}
		}
		return in
	}
	r0 := turn(0, 10, call("a"), call("b"))
	r1 := turn(1, 5, call("c"))
	final := agent.TurnRecord{Turn: 1, Text: "done", FinishReason: "stop", Usage: agent.Usage{PromptTokens: 3, CompletionTokens: 4}}
	foreign := intentOf(r1, 0, "forged")
	foreign.Spec.RequestedBy = "mallory"
	renamed := intentOf(r1, 0, "z")
	renamed.Name = "t-t1-0-x7k2p"
	otherCall := intentOf(r1, 0, "z")
	otherCall.Spec.ProposedBy.ToolCallID = "not-c"
	accepted := map[int32]v1.CompletionCheck{1: {Turn: 1, Action: v1.DecisionAllow}}
	redirected := map[int32]v1.CompletionCheck{1: {Turn: 1, Action: v1.DecisionRedirect, PolicyRuleRef: ptr.To(v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "tests-first")), Instruction: "Run the tests."}}
	refused := map[int32]v1.CompletionCheck{1: {Turn: 1, Action: v1.DecisionDeny, PolicyRuleRef: ptr.To(v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "no")), Reason: "never"}}
	redirectedCall := intentOf(r0, 1, "not run")
	redirectedCall.Status.Decision = &v1.Decision{Action: v1.DecisionRedirect, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "plan")}
	redirectedCall.Status.Observation.Instruction = "Plan first."
	redirectedCall.Status.Observation.Outcome = v1.OutcomeRedirected

	for _, tc := range []struct {
		name         string
		records      []agent.TurnRecord
		checks       map[int32]v1.CompletionCheck
		intents      []v1.ToolIntent
		want         pipeline.ModelWorld
		missing      []int
		history      int
		instructions []agent.Instruction
	}{
		{name: "no turn yet", want: pipeline.ModelWorld{NextTurnDue: true}},
		{name: "recorded, no intents (restart)", records: []agent.TurnRecord{r0},
			want: pipeline.ModelWorld{Turns: 1, TokensUsed: 10}, missing: []int{0, 1}, history: 1},
		{name: "one of two observed", records: []agent.TurnRecord{r0}, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), intentOf(r0, 1, "")},
			want: pipeline.ModelWorld{Turns: 1, TokensUsed: 10}, history: 1},
		{name: "one intent missing", records: []agent.TurnRecord{r0}, intents: []v1.ToolIntent{intentOf(r0, 0, "x")},
			want: pipeline.ModelWorld{Turns: 1, TokensUsed: 10}, missing: []int{1}, history: 1},
		{name: "all observed", records: []agent.TurnRecord{r0, r1}, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), intentOf(r0, 1, "y"), intentOf(r1, 0, "z")},
			want: pipeline.ModelWorld{Turns: 2, TokensUsed: 15, NextTurnDue: true}, history: 2},
		{name: "final answer, tokens from parts", records: []agent.TurnRecord{r0, final}, checks: accepted, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), intentOf(r0, 1, "y")},
			want: pipeline.ModelWorld{Turns: 2, TokensUsed: 17, Answer: ptr.To("done")}, history: 2},
		{name: "final answer not checked yet", records: []agent.TurnRecord{r0, final}, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), intentOf(r0, 1, "y")},
			want: pipeline.ModelWorld{Turns: 2, TokensUsed: 17, CompletionDue: true}, history: 2},
		{name: "final answer redirected: the loop goes on", records: []agent.TurnRecord{r0, final}, checks: redirected, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), intentOf(r0, 1, "y")},
			want: pipeline.ModelWorld{Turns: 2, TokensUsed: 17, NextTurnDue: true}, history: 2,
			instructions: []agent.Instruction{{Rule: "ToolPolicy/p/tests-first", Text: "Run the tests."}}},
		{name: "final answer refused", records: []agent.TurnRecord{r0, final}, checks: refused, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), intentOf(r0, 1, "y")},
			want: pipeline.ModelWorld{Turns: 2, TokensUsed: 17, CompletionDenied: "the final answer of turn 1 was refused by rule ToolPolicy/p/no: never"}, history: 2},
		{name: "a redirected call's instruction follows its turn", records: []agent.TurnRecord{r0}, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), redirectedCall},
			want: pipeline.ModelWorld{Turns: 1, TokensUsed: 10, NextTurnDue: true}, history: 1,
			instructions: []agent.Instruction{{Rule: "ToolPolicy/p/plan", Text: "Plan first."}}},
		{name: "refusal", records: []agent.TurnRecord{{Turn: 0, Refusal: "I can't help with that."}},
			want: pipeline.ModelWorld{Turns: 1, Failure: "the model refused in turn 0: I can't help with that."}, history: 1},
		{name: "answer cut at length", records: []agent.TurnRecord{{Turn: 0, Text: "The fix is", FinishReason: "length"}},
			want: pipeline.ModelWorld{Turns: 1, Failure: "the model's reply in turn 0 was cut at its length limit (finish_reason length) before it proposed a tool call or finished its answer"}, history: 1},
		{name: "another user's intent in the call's place is no part of the task", records: []agent.TurnRecord{r0, r1}, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), intentOf(r0, 1, "y"), foreign},
			want: pipeline.ModelWorld{Turns: 2, TokensUsed: 15}, missing: []int{0}, history: 2},
		{name: "the call under another name, another user's in its place", records: []agent.TurnRecord{r0, r1}, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), intentOf(r0, 1, "y"), foreign, renamed},
			want: pipeline.ModelWorld{Turns: 2, TokensUsed: 15, NextTurnDue: true}, history: 2},
		{name: "the loop's intent for another tool call", records: []agent.TurnRecord{r0, r1}, intents: []v1.ToolIntent{intentOf(r0, 0, "x"), intentOf(r0, 1, "y"), otherCall},
			want: pipeline.ModelWorld{Turns: 2, TokensUsed: 15, Failure: "ToolIntent t-t1-0 was created as call 0 of turn 1, but for tool call not-c, not c as the turn record says: its observation is not the model's; delete it and create a new task"}, history: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := loopStateOf(task, tc.records, tc.checks, tc.intents, me)
			got, want := s.world, tc.want
			got.Answer, want.Answer = nil, nil
			if got != want || (s.world.Answer == nil) != (tc.want.Answer == nil) || s.world.Answer != nil && *s.world.Answer != *tc.want.Answer {
				t.Errorf("world %+v, want %+v", s.world, tc.want)
			}
			if !slices.Equal(s.missing, tc.missing) || len(s.history) != tc.history {
				t.Errorf("missing %v, history %d turns; want %v and %d", s.missing, len(s.history), tc.missing, tc.history)
			}
			if s.world.NextTurnDue {
				msgs, err := agent.BuildMessages(agent.SystemPrompt, "goal", s.history)
				if err != nil {
					t.Errorf("a due turn's history does not build: %v", err)
				}
				last := msgs[len(msgs)-1]
				if len(tc.instructions) > 0 && (last.Role != agent.RoleUser || !strings.Contains(last.Content, tc.instructions[0].Text)) {
					t.Errorf("the last message is %+v, want the user message with the instruction %q", last, tc.instructions[0].Text)
				}
			}
			if tc.history > 0 {
				if got := s.history[len(s.history)-1].Instructions; !slices.Equal(got, tc.instructions) {
					t.Errorf("instructions %v, want %v", got, tc.instructions)
				}
			}
		})
	}
}

// TestTaskStatusOfModelTasks: what the records say becomes the task's status.
func TestTaskStatusOfModelTasks(t *testing.T) {
	task := func(b v1.Budgets) *v1.AgentTask {
		return &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "t", Generation: 1},
			Spec: v1.AgentTaskSpec{Agent: v1.AgentSpec{Model: &v1.ModelAgent{}}, Budgets: b}}
	}
	running := v1.Budgets{MaxTurns: 3, MaxTokens: ptr.To[int64](100)}
	for _, tc := range []struct {
		name          string
		budgets       v1.Budgets
		model         pipeline.ModelWorld
		typ, reason   string
		phase         v1.TaskPhase
		result        string
		turn, tokens  int64
		readyReason   string
		messageSubstr string
	}{
		{name: "first turn due", budgets: running, model: pipeline.ModelWorld{NextTurnDue: true},
			typ: v1.ConditionSucceeded, reason: v1.ReasonRunning, phase: v1.TaskRunning, readyReason: v1.ReasonWorkspaceReady},
		{name: "answer", budgets: running, model: pipeline.ModelWorld{Turns: 3, TokensUsed: 90, Answer: ptr.To("fixed")},
			typ: v1.ConditionSucceeded, reason: v1.ReasonCompleted, phase: v1.TaskSucceeded, result: "fixed", turn: 2, tokens: 90, readyReason: v1.ReasonWorkspaceReady},
		{name: "turn budget at the turn boundary", budgets: running, model: pipeline.ModelWorld{Turns: 3, TokensUsed: 10, NextTurnDue: true},
			typ: v1.ConditionFailed, reason: v1.ReasonTurnBudgetExhausted, phase: v1.TaskFailed, turn: 2, tokens: 10, readyReason: v1.ReasonWorkspaceReady, messageSubstr: "budgets.maxTurns"},
		{name: "last turn's calls still run", budgets: running, model: pipeline.ModelWorld{Turns: 3, TokensUsed: 500},
			typ: v1.ConditionFailed, reason: v1.ReasonRunning, phase: v1.TaskRunning, turn: 2, tokens: 500, readyReason: v1.ReasonWorkspaceReady},
		{name: "token budget at the turn boundary", budgets: running, model: pipeline.ModelWorld{Turns: 1, TokensUsed: 100, NextTurnDue: true},
			typ: v1.ConditionFailed, reason: v1.ReasonTokenBudgetExhausted, phase: v1.TaskFailed, tokens: 100, readyReason: v1.ReasonWorkspaceReady},
		{name: "model error", budgets: running, model: pipeline.ModelWorld{Failure: "turn 0: HTTP 401"},
			typ: v1.ConditionFailed, reason: v1.ReasonModelError, phase: v1.TaskFailed, readyReason: v1.ReasonWorkspaceReady, messageSubstr: "HTTP 401"},
		{name: "waiting for the key", budgets: running, model: pipeline.ModelWorld{NextTurnDue: true, Unavailable: `Secret "k" ... does not exist`},
			typ: v1.ConditionReady, reason: v1.ReasonModelUnavailable, phase: v1.TaskPending, readyReason: v1.ReasonModelUnavailable, messageSubstr: `Secret "k"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.model
			st := pipeline.TaskStatus(task(tc.budgets), pipeline.TaskWorld{WorkspaceReady: true, Model: &m}, metav1.Now())
			c := meta.FindStatusCondition(st.Conditions, tc.typ)
			ready := meta.FindStatusCondition(st.Conditions, v1.ConditionReady)
			if c == nil || c.Reason != tc.reason || st.Phase != tc.phase || st.Result != tc.result || int64(st.Turn) != tc.turn || st.TokensUsed != tc.tokens || ready.Reason != tc.readyReason {
				t.Fatalf("status %+v", st)
			}
			mustContain(t, "message", c.Message, tc.messageSubstr)
		})
	}
}

// TestAgentLoopTurnRecordsAreMasked: the model's prose in a turn record (readable by
// every viewer of the namespace, and sent back to the model) is masked like an
// observation: the task's API key, a password, a terminal escape. The tool call's
// arguments are the call itself and are kept as the model sent them, so the
// ToolIntent carries exactly what the model asked to run.
func TestAgentLoopTurnRecordsAreMasked(t *testing.T) {
	p := newLoopEnv(t)
	p.start()
	const args = `{"command":"grep -r password=hunter2222 config"}`
	server := fixtures.NewChatServer(t,
		toolCalls("The key is "+testAPIKey+" and the database password=hunter2222 \x1b[2J Searching.", 10, chatCall{"c1", "bash", args}),
	)
	p.modelTask("masked", v1.ModeReadOnly, server)
	p.exists(transcript.ModelIntentName("masked", 0, 0))

	cm, rec := p.record("masked", 0)
	for _, leak := range []string{testAPIKey, "hunter2222 ", "\x1b"} {
		if strings.Contains(rec.Text, leak) {
			t.Errorf("turn record text %q still holds %q", rec.Text, leak)
		}
	}
	mustContain(t, "the masked turn record", rec.Text, "The key is [MASKED]", "password=[MASKED]", `\x1b[2J`)
	if strings.Contains(cm.Data[transcript.TurnRecordKey], testAPIKey) {
		t.Errorf("the ConfigMap holds the API key: %s", cm.Data[transcript.TurnRecordKey])
	}
	if len(rec.ToolCalls) != 1 || rec.ToolCalls[0].Arguments != args {
		t.Fatalf("the call's arguments changed in the record: %+v", rec.ToolCalls)
	}
	intent := &v1.ToolIntent{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: transcript.ModelIntentName("masked", 0, 0)}, intent); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "the intent's input", intent.Spec.Input.Raw, args)
}

// A final answer longer than status.result holds (the CRD's maxLength,
// MaxResultBytes) still ends the task Succeeded: the result is its start, cut where
// the controller says so, and the turn record keeps the whole answer. Before the
// result was cut, the API server refused the status write (422) and the task never
// ended.
func TestAgentLoopLongAnswerIsCutToTheResultBound(t *testing.T) {
	p := newLoopEnv(t)
	p.start()
	long := strings.Repeat("All tests pass. ", 2*v1.MaxResultBytes/16)
	server := fixtures.NewChatServer(t, answer(long, 10))
	p.modelTask("verbose", v1.ModeReadOnly, server)
	got := p.finished("verbose", v1.ConditionSucceeded, v1.ReasonCompleted)
	if len(got.Status.Result) > v1.MaxResultBytes || !strings.HasPrefix(got.Status.Result, "All tests pass. All tests pass.") ||
		!strings.HasSuffix(got.Status.Result, "the whole answer is in the record of turn 0]") {
		t.Fatalf("result of %d bytes, ending %q", len(got.Status.Result), got.Status.Result[max(len(got.Status.Result)-120, 0):])
	}
	if _, rec := p.record("verbose", 0); rec.Text != long {
		t.Fatalf("the turn record holds %d bytes of the %d-byte answer", len(rec.Text), len(long))
	}
}
