package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/transcript"
)

// The controller's identity in these tests: the agent loop proposed the recorded
// calls as it.
const loopUser = "system:serviceaccount:toolgate-system:toolgate-controller-manager"

// modelKey is the recorded task's API key; no report may show it.
const modelKey = "sk-replay-secret-key-0123456789"

// scriptedModel is a Chat Completions endpoint that answers each turn (the number of
// assistant messages in the conversation it is sent) from a script, and keeps every
// conversation it was sent. The real openai-go SDK talks to it through agent.Client.
type scriptedModel struct {
	t      *testing.T
	mu     sync.Mutex
	script func(turn int) (status int, body string)
	asked  [][]map[string]any
	keys   []string
}

func newScriptedModel(t *testing.T, script func(turn int) (int, string)) (*scriptedModel, string) {
	m := &scriptedModel{t: t, script: script}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		data, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []map[string]any `json:"messages"`
		}
		if err := json.Unmarshal(data, &req); err != nil {
			t.Errorf("the replay sent a body that is not JSON: %v", err)
		}
		turn := 0
		for _, msg := range req.Messages {
			if msg["role"] == "assistant" {
				turn++
			}
		}
		m.mu.Lock()
		m.asked = append(m.asked, req.Messages)
		m.keys = append(m.keys, r.Header.Get("Authorization"))
		m.mu.Unlock()
		status, body := script(turn)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return m, srv.URL + "/v1"
}

// completion is a reply with calls (each name, arguments), or an answer without.
func completion(model, text string, calls ...[2]string) string {
	var tcs []map[string]any
	for i, c := range calls {
		tcs = append(tcs, map[string]any{"id": fmt.Sprintf("call_%d", i), "type": "function", "function": map[string]any{"name": c[0], "arguments": c[1]}})
	}
	msg := map[string]any{"role": "assistant", "content": text}
	finish := "stop"
	if len(tcs) > 0 {
		msg["tool_calls"], finish = tcs, "tool_calls"
	}
	data, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 90, "completion_tokens": 10, "total_tokens": 100},
	})
	return string(data)
}

// The recorded task: four turns of a model that read calc.sh, fixed it, ran the
// test and answered.
var (
	readCall = [2]string{"read_file", `{"path":"calc.sh"}`}
	editCall = [2]string{"edit_file", `{"path":"calc.sh","oldText":"a - b","newText":"a + b"}`}
	testCall = [2]string{"bash", `{"command":"sh test.sh"}`}
	// recordedTurns are the replies as the recorded model gave them.
	recordedTurns = []string{
		completion("recorded-model", "Let me read the script.", readCall),
		completion("recorded-model", "It subtracts; fix it.", editCall),
		completion("recorded-model", "Run the test.", testCall),
		completion("recorded-model", "Fixed: calc.sh adds, and the test passes."),
	}
	readObservation = "[exit code: 0]\n#!/bin/sh\necho $((a - b))\n"
)

// recordModelTask records, as the controller would have left it, a model task whose
// endpoint is baseURL: its turn records, its intents with their decisions and
// observations, and its API key Secret.
func recordModelTask(t *testing.T, ns, baseURL string) *v1.AgentTask {
	t.Helper()
	ctx := t.Context()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "model-key", Labels: map[string]string{"toolgate.dev/model-credentials": "true"}},
		StringData: map[string]string{"key": modelKey + "\n"},
	}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fix"},
		Spec: v1.AgentTaskSpec{
			Goal:      "Make the failing test pass: calc.sh subtracts where the test expects a sum.",
			Mode:      v1.ModeEdit,
			Workspace: v1.WorkspaceSpec{ExistingClaim: "src"},
			Agent: v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: baseURL, Model: "recorded-model",
				APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "key"}}},
		},
	}
	if err := env.Client.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}
	zero := int32(0)
	decisions := []struct {
		action   v1.DecisionAction
		category v1.CommandCategory
		summary  string
	}{
		{v1.DecisionAllow, v1.CategoryReadOnly, readObservation},
		{v1.DecisionAsk, v1.CategoryWrite, "[exit code: 0]\nedited calc.sh\n"},
		{v1.DecisionAllow, v1.CategoryTest, "[exit code: 0]\nok\n"},
	}
	for turn, body := range recordedTurns {
		var cc struct {
			Choices []struct {
				Message struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						ID       string `json:"id"`
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(body), &cc); err != nil {
			t.Fatal(err)
		}
		msg := cc.Choices[0].Message
		rec := agent.TurnRecord{Turn: int32(turn), Model: "recorded-model", Text: msg.Content, FinishReason: cc.Choices[0].FinishReason, Usage: agent.Usage{TotalTokens: 100}}
		for _, c := range msg.ToolCalls {
			rec.ToolCalls = append(rec.ToolCalls, agent.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		data, _ := rec.Marshal()
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: transcript.TurnRecordName(task.Name, int32(turn)), OwnerReferences: owner},
			Immutable:  ptr.To(true),
			Data:       map[string]string{transcript.TurnRecordKey: string(data)},
		}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		for i := range rec.ToolCalls {
			in := transcript.ModelIntent(task, rec, i, loopUser)
			d := decisions[turn]
			in.Status = v1.ToolIntentStatus{
				Validation:  &v1.Validation{},
				Decision:    &v1.Decision{Action: d.action, PolicyRuleRef: v1.ModeDefaultReference(v1.ModeEdit), Reason: "no rule matched", Category: d.category},
				Observation: &v1.Observation{Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: &zero, Summary: d.summary},
			}
			if in.Spec.Tool == v1.ToolReadFile {
				// A read records the hash an edit of the file is checked against.
				in.Status.Observation.ContentSHA256 = strings.Repeat("ab", 32)
			}
			record(t, in)
		}
	}
	return task
}

func TestReplayModelRepeatsTheHistory(t *testing.T) {
	ns := testNamespace(t)
	model, url := newScriptedModel(t, func(turn int) (int, string) {
		// The same calls, with the keys of the edit in another order: the same input.
		if turn == 1 {
			return 200, completion("candidate-2", "Fix it.", [2]string{"edit_file", `{"newText":"a + b","oldText":"a - b","path":"calc.sh"}`})
		}
		return 200, strings.Replace(recordedTurns[turn], "recorded-model", "candidate-2", 1)
	})
	recordModelTask(t, ns, url)

	code, out, errOut := kubectl(t, adminUser, ns, "", "replay", "fix", "--model")
	if code != replayUnchanged {
		t.Fatalf("replay of a model that repeats the history exited %d; want 0\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"Model replay of task " + ns + "/fix: asked recorded-model at " + url,
		"  turn 0: Same (recorded by recorded-model, replayed by candidate-2)",
		"Same     read_file fix-t0-0",
		"Same     edit_file fix-t1-0",
		"now:      Ask by ModeDefault/Edit",
		"answered, as recorded: Fixed",
		"0 of 4 turns changed (400 tokens spent).",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	// Each turn was asked with the conversation before it as recorded: turn 1 got the
	// recorded observation of turn 0's read, never a new one; the key came from the
	// task's Secret.
	if len(model.asked) != 4 {
		t.Fatalf("the model was asked %d times; want once per recorded turn (4)", len(model.asked))
	}
	turn1 := model.asked[1]
	if len(turn1) != 4 || turn1[3]["role"] != "tool" || turn1[3]["content"] != readObservation || turn1[3]["tool_call_id"] != "call_0" {
		t.Errorf("turn 1 was asked with %v; want the system prompt, the goal, the recorded reply and its recorded observation", turn1)
	}
	if turn1[0]["content"] != agent.SystemPrompt {
		t.Errorf("the system prompt was not toolgate's")
	}
	for _, k := range model.keys {
		if k != "Bearer "+modelKey {
			t.Errorf("the endpoint got Authorization %q; want the task's key", k)
		}
	}
	if strings.Contains(out+errOut, modelKey) {
		t.Errorf("the report shows the API key:\n%s", out)
	}
}

func TestReplayModelReportsAChangedEditWithItsNewDecision(t *testing.T) {
	ns := testNamespace(t)
	_, url := newScriptedModel(t, func(turn int) (int, string) {
		if turn == 1 {
			return 200, completion("candidate", "Rewrite it.", [2]string{"write_file", `{"path":"calc.sh","content":"echo $((a + b))\n"}`}, [2]string{"edit_file", `{"path":"calc.sh","oldText":"a - b","newText":"b + a"}`})
		}
		return 200, recordedTurns[turn]
	})
	recordModelTask(t, ns, url)
	// A policy today denies writing whole files.
	if err := env.Client.Create(t.Context(), &v1.ToolPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-overwrites"},
		Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{{Name: "deny-write-file", Action: v1.RuleDeny, Reason: "edit, do not overwrite",
			Match: v1.RuleMatch{Tools: []v1.ToolName{v1.ToolWriteFile}}}}},
	}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := kubectl(t, adminUser, ns, "", "replay", "fix", "--model", "--model-name", "candidate", "-o", "json")
	if code != replayChanged {
		t.Fatalf("replay of a model that edits differently exited %d; want 1\n%s\n%s", code, out, errOut)
	}
	var rep ModelReplayReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Changed != 1 || len(rep.Turns) != 4 || rep.Model != "candidate" || rep.Turns[0].Outcome != TurnSame || rep.Turns[2].Outcome != TurnSame {
		t.Fatalf("report: %+v", rep)
	}
	turn := rep.Turns[1]
	if turn.Outcome != TurnChanged || len(turn.Calls) != 2 {
		t.Fatalf("turn 1: %+v", turn)
	}
	added, changed := turn.Calls[0], turn.Calls[1]
	if added.Comparison != CallAdded || added.Tool != v1.ToolWriteFile || added.Replayed == nil || added.Replayed.Outcome != "Deny" || added.Replayed.PolicyRuleRef == nil || added.Replayed.PolicyRuleRef.Rule != "deny-write-file" {
		t.Errorf("the added write_file: %+v %+v", added, added.Replayed)
	}
	if changed.Comparison != CallChanged || changed.RecordedIntent != "fix-t1-0" || len(changed.Diff) != 1 || changed.Diff[0] != `newText: "a + b" -> "b + a"` {
		t.Errorf("the changed edit: %+v", changed)
	}
	if changed.Recorded == nil || changed.Recorded.Outcome != "Ask" || changed.Replayed == nil || changed.Replayed.Outcome != "Ask" {
		t.Errorf("the changed edit's verdicts: recorded %+v, now %+v", changed.Recorded, changed.Replayed)
	}

	code, text, _ := kubectl(t, adminUser, ns, "", "replay", "fix", "--model", "--model-name", "candidate")
	for _, want := range []string{
		"! turn 1: Changed",
		"Added    write_file",
		"now:      Deny by ToolPolicy/no-overwrites/deny-write-file",
		"Changed  edit_file fix-t1-0",
		`newText: "a + b" -> "b + a"`,
		"1 of 4 turns changed",
	} {
		if code != replayChanged || !strings.Contains(text, want) {
			t.Errorf("exit %d; the report lacks %q:\n%s", code, want, text)
		}
	}
}

func TestReplayModelThatAnswersEarly(t *testing.T) {
	ns := testNamespace(t)
	_, url := newScriptedModel(t, func(turn int) (int, string) {
		if turn == 1 {
			return 200, completion("candidate", "It is fine as it is.")
		}
		return 200, recordedTurns[turn]
	})
	recordModelTask(t, ns, url)
	code, out, errOut := kubectl(t, adminUser, ns, "", "replay", "fix", "--model")
	if code != replayChanged {
		t.Fatalf("exit %d; want 1\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"! turn 1: Changed",
		"Missing  edit_file fix-t1-0",
		"recorded: Ask by ModeDefault/Edit",
		"answered instead of calling tools: It is fine as it is.",
		"1 of 4 turns changed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}

	// --dry-run judges a model task's calls as proposed by the agent loop (the
	// identity its recorded validation accepted), not as proposed by nobody.
	_, out, _ = kubectl(t, adminUser, ns, "", "replay", "fix", "--dry-run")
	if strings.Contains(out, "Invalid") || !strings.Contains(out, "now:      Allow by ModeDefault/Edit") {
		t.Errorf("dry-run replay of the model task:\n%s", out)
	}
}

func TestReplayModelProviderErrors(t *testing.T) {
	ns := testNamespace(t)
	var mu sync.Mutex
	failures := map[int]int{}
	model, url := newScriptedModel(t, func(turn int) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case turn == 0 && failures[0] < 1:
			// A server error is retried by the client, as in the agent loop.
			failures[0]++
			return 503, `{"error":{"message":"overloaded","type":"server_error"}}`
		case turn == 2:
			return 401, `{"error":{"message":"Incorrect API key provided: ` + modelKey + `","type":"invalid_request_error","code":"invalid_api_key"}}`
		}
		return 200, recordedTurns[turn]
	})
	recordModelTask(t, ns, url)
	code, out, errOut := kubectl(t, adminUser, ns, "", "replay", "fix", "--model")
	if code != replayError {
		t.Fatalf("replay with a failing provider exited %d; want 2\n%s\n%s", code, out, errOut)
	}
	if len(model.asked) != 4 {
		t.Errorf("the model was asked %d times; want turn 0 twice (retried), turns 1 and 2 once, and nothing after the error", len(model.asked))
	}
	for _, want := range []string{"  turn 0: Same", "  turn 1: Same", "! turn 2: Error", "  turn 3: NotReplayed", "the model failed on an earlier turn", "The replay stopped: turn 2:", "401"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "the model replay stopped at turn 2") {
		t.Errorf("stderr: %q", errOut)
	}
	if strings.Contains(out+errOut, modelKey) {
		t.Errorf("the provider's message showed the API key unmasked:\n%s\n%s", out, errOut)
	}

	// The key of the task's Secret is never sent to another endpoint.
	code, _, errOut = kubectl(t, adminUser, ns, "", "replay", "fix", "--model", "--base-url", "https://elsewhere.example/v1")
	if code != replayError || !strings.Contains(errOut, "is sent only to its own endpoint") {
		t.Errorf("another --base-url with the Secret's key: exit %d, %q", code, errOut)
	}
	// A token budget stops the replay before the model is asked again.
	asked := len(model.asked)
	code, out, _ = kubectl(t, adminUser, ns, "", "replay", "fix", "--model", "--max-tokens", "150")
	if code != replayUnchanged || !strings.Contains(out, "  turn 2: NotReplayed\n    the replay spent its token budget (200 of 150 tokens; --max-tokens)") || len(model.asked)-asked != 2 {
		t.Errorf("replay with --max-tokens 150: exit %d, asked %d times:\n%s", code, len(model.asked)-asked, out)
	}
}

// A task whose external agent records no turns gets a clear refusal.
func TestReplayModelOfAnExternalTask(t *testing.T) {
	ns := testNamespace(t)
	replayTask(t, ns)
	code, _, errOut := kubectl(t, adminUser, ns, "", "replay", "fix-tests", "--model", "--base-url", "http://127.0.0.1:1/v1", "--model-name", "m")
	if code != replayError || !strings.Contains(errOut, "its agent is external, and only a task with spec.agent.model records the model's turns") {
		t.Errorf("exit %d, %q", code, errOut)
	}
}

// pairCalls is pure: calls in another order and inputs with keys in another order
// still pair as the same. A recorded call is named by its intent (one the loop
// created under another name when its own was taken), else by the name it would
// have.
func TestPairCalls(t *testing.T) {
	task := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "fix"}}
	rec := agent.TurnRecord{Turn: 2, ToolCalls: []agent.ToolCall{{ID: "a", Name: "read_file", Arguments: `{"path":"a"}`}, {ID: "b", Name: "read_file", Arguments: `{"path":"b"}`}, {ID: "c", Name: "bash", Arguments: `{"command":"ls"}`}}}
	proposed := agent.TurnRecord{Turn: 2, ToolCalls: []agent.ToolCall{{Name: "read_file", Arguments: ` { "path" : "b" } `}, {Name: "read_file", Arguments: `{"path":"c"}`}, {Name: "grep", Arguments: `{"pattern":"x"}`}}}
	recorded := []*v1.ToolIntent{{ObjectMeta: metav1.ObjectMeta{Name: "fix-t2-0-x7k2p"}, Spec: v1.ToolIntentSpec{Input: runtime.RawExtension{Raw: []byte(`{"path":"a"}`)}}}}
	got := pairCalls(task, rec, proposed, recorded, func(int) *Verdict { return nil })
	want := []string{"Same fix-t2-1", "Changed fix-t2-0-x7k2p", "Added ", "Missing fix-t2-2"}
	if len(got) != len(want) {
		t.Fatalf("%d calls: %+v", len(got), got)
	}
	for i, w := range want {
		if g := got[i].Comparison + " " + got[i].RecordedIntent; g != w {
			t.Errorf("call %d: %s; want %s", i, g, w)
		}
	}
	if d := got[1].Diff; len(d) != 1 || d[0] != `path: "a" -> "c"` {
		t.Errorf("diff %v", d)
	}
}
