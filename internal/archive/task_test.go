package archive

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
)

func endedTask(condition string) *v1.AgentTask {
	return &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "team-a", UID: "task-uid"},
		Spec:       v1.AgentTaskSpec{Goal: "make the tests pass", Mode: v1.ModeEdit},
		Status: v1.AgentTaskStatus{Conditions: []metav1.Condition{
			{Type: v1.ConditionSucceeded, Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(epoch)},
			{Type: condition, Status: metav1.ConditionTrue, Reason: "Done", LastTransitionTime: metav1.NewTime(epoch.Add(3e9))},
		}},
	}
}

func TestTaskRecord(t *testing.T) {
	if _, err := TaskRecord(endedTask(v1.ConditionReady), nil, nil, nil); err == nil || !strings.Contains(err.Error(), "has not ended") {
		t.Fatalf("a running task was recorded: %v", err)
	}
	turns := []agent.TurnRecord{{Turn: 0, Text: "reading", ToolCalls: []agent.ToolCall{{ID: "c1", Name: "read_file"}}}, {Turn: 1, Text: "done"}}
	checks := map[int32]v1.CompletionCheck{1: {Turn: 1, Action: v1.DecisionAllow}}
	rec, err := TaskRecord(endedTask(v1.ConditionFailed), turns, checks, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != KindTask || rec.UID != "task-uid" || rec.TaskUID != "task-uid" || !rec.RecordedAt.Equal(epoch.Add(3e9)) {
		t.Fatalf("record %+v: want the task's own chain, recorded when it failed", rec)
	}
	var body Task
	if err := json.Unmarshal(rec.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Task.Spec.Goal != "make the tests pass" || len(body.Turns) != 2 || len(body.CompletionChecks) != 1 || body.CompletionChecks[0].Turn != 1 {
		t.Fatalf("body %+v: want the goal, both turns and turn 1's check", body)
	}
}
