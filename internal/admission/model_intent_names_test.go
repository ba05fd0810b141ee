package admission

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/transcript"
)

// twoCallModel is an OpenAI-compatible endpoint that proposes one bash call in each
// of the first two turns (telling the turn by the tool results the conversation
// already holds) and then answers "done". It answers turn 1 only once ready is
// closed.
func twoCallModel(t *testing.T, ready <-chan struct{}) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		turn := 0
		for _, m := range req.Messages {
			if m.Role == "tool" {
				turn++
			}
		}
		if turn == 1 {
			select {
			case <-ready:
			case <-r.Context().Done():
				return
			}
		}
		message := map[string]any{"role": "assistant", "content": "done"}
		finish := "stop"
		if turn < 2 {
			finish = "tool_calls"
			message = map[string]any{"role": "assistant", "content": "Look around.", "tool_calls": []map[string]any{
				{"id": "call-" + string(rune('0'+turn)), "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"command":"ls"}`}},
			}}
		}
		out, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": "test-model",
			"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": message}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The names of a model task's intents are predictable (TASK-tN-i), and any user
// bound to toolgate-agent in the namespace may create intents. agent-bot takes the
// name of the first call before the task even exists, and the name of the second
// call (naming the task as its controller owner, to look like the loop's) before
// the model proposes it. The task goes on: the loop creates each call under a name
// the API server makes up, the calls run, and the task succeeds with the model's
// answer; the task says whose intent took each name. agent-bot's intents are
// refused by validation (only the agent loop proposes for a model task) and never
// run.
func TestATakenIntentNameDoesNotStopAModelTask(t *testing.T) {
	ns := proposersNamespace(t, rbacv1.Subject{Kind: rbacv1.UserKind, Name: agentUser})
	runJobs(t, ns)
	ready := make(chan struct{})
	model := twoCallModel(t, ready)
	const modelOnly = "only toolgate's agent loop proposes calls for a model task"

	first := propose(t, clients[agentUser], ns, transcript.ModelIntentName(victimTask, 0, 0), victimTask, agentUser)
	task := createTask(t, ns, victimTask, v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: model.URL + "/v1", Model: "test-model"}})
	task = getTask(t, ns, task.Name)
	second := toolIntent(ns, transcript.ModelIntentName(victimTask, 1, 0), agentUser)
	second.Spec.TaskRef.Name = victimTask
	second.Spec.Turn = 1
	second.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}
	if err := clients[agentUser].Create(t.Context(), second); err != nil {
		t.Fatalf("%s taking the name of the second call: %v", agentUser, err)
	}
	close(ready)

	var done *v1.AgentTask
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		done = getTask(t, ns, victimTask)
		return done.Status.Phase == v1.TaskSucceeded || done.Status.Phase == v1.TaskFailed, nil
	})
	if err != nil || done.Status.Phase != v1.TaskSucceeded || done.Status.Result != "done" {
		t.Fatalf("the task after its intent names were taken: phase %s, result %q, conditions %+v; want Succeeded with the model's answer", done.Status.Phase, done.Status.Result, done.Status.Conditions)
	}

	var intents v1.ToolIntentList
	if err := env.Client.List(t.Context(), &intents, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for turn := int32(0); turn < 2; turn++ {
		var calls []string
		for i := range intents.Items {
			in := &intents.Items[i]
			if !transcript.IsLoopIntent(in, task, controllerUser) || in.Spec.Turn != turn {
				continue
			}
			calls = append(calls, in.Name)
			if !strings.HasPrefix(in.Name, transcript.ModelIntentGenerateName(victimTask, turn, 0)) {
				t.Errorf("the loop's call of turn %d is %s; want it under a made-up name", turn, in.Name)
			}
			if obs := in.Status.Observation; obs == nil || obs.Outcome != v1.OutcomeSucceeded || !obs.Executed {
				t.Errorf("the loop's call %s: observation %+v; want it run", in.Name, obs)
			}
		}
		if len(calls) != 1 {
			t.Errorf("turn %d: the loop's intents %v; want exactly one", turn, calls)
		}
	}
	// The first was validated while its task did not exist yet, or after: refused
	// either way.
	wantRefusedByValidation(t, first, "")
	wantRefusedByValidation(t, second, modelOnly)

	taken := 0
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return false, err
		}
		taken = 0
		for _, e := range events.Items {
			if e.Reason == controller.EventIntentNameTaken && e.InvolvedObject.Name == victimTask && strings.Contains(e.Message, "was created by "+agentUser) {
				taken++
			}
		}
		return taken == 2, nil
	})
	if err != nil {
		t.Errorf("%d %s events on the task naming %s; want one for each taken name", taken, controller.EventIntentNameTaken, agentUser)
	}
}
