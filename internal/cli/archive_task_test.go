package cli

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/transcript"
)

// endTask records the task's end, as the controller does when it succeeds.
func endTask(t *testing.T, task *v1.AgentTask) {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(task), task); err != nil {
		t.Fatal(err)
	}
	task.Status.Phase = v1.TaskSucceeded
	task.Status.Conditions = []metav1.Condition{{Type: v1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: v1.ReasonMarkedDone, Message: "done", LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(t.Context(), task); err != nil {
		t.Fatal(err)
	}
}

// archiveAndDeleteTask stores the ended task's record, with its turn records, and
// deletes it and its turn records from the cluster, as retention will.
func archiveAndDeleteTask(t *testing.T, a *archive.Archive, task *v1.AgentTask) {
	t.Helper()
	ctx := t.Context()
	turns, checks, problem, err := transcript.Read(ctx, env.Client, task)
	if err != nil || problem != "" {
		t.Fatalf("reading the turn records: %v %s", err, problem)
	}
	rec, err := archive.TaskRecord(task, turns, checks, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Store(ctx, rec); err != nil {
		t.Fatal(err)
	}
	for turn := range turns {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: task.Namespace, Name: transcript.TurnRecordName(task.Name, int32(turn))}}
		if err := env.Client.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Delete(ctx, task); err != nil {
		t.Fatal(err)
	}
}

// TestArchivedTaskReadsTheSame: once an ended task, its calls and its turn records
// are archived and deleted from the cluster, trace and replay --dry-run of it print
// what they printed before, and so does replay --model, from the archived turns.
func TestArchivedTaskReadsTheSame(t *testing.T) {
	a := startArchive(t)
	ns := testNamespace(t)
	_, url := newScriptedModel(t, func(turn int) (int, string) {
		return 200, strings.Replace(recordedTurns[turn], "recorded-model", "candidate-2", 1)
	})
	task := recordModelTask(t, ns, url)
	endTask(t, task)
	observedNow(t, ns)
	commands := [][]string{{"trace", "fix"}, {"trace", "fix", "-o", "json"}, {"replay", "fix", "--dry-run"}, {"replay", "fix", "--model", "-o", "json"}}
	before := map[string]string{}
	for _, args := range commands {
		code, out, errOut := kubectl(t, adminUser, ns, "", args...)
		before[strings.Join(args, " ")] = fmt.Sprintf("exit %d\n%s%s", code, out, errOut)
		if code > 1 {
			t.Fatalf("%v before archiving exited %d: %s%s", args, code, out, errOut)
		}
	}
	if moved := archiveAndDelete(t, a, task); len(moved) != 3 {
		t.Fatalf("archived and deleted %v, want the task's 3 calls", moved)
	}
	archiveAndDeleteTask(t, a, task)
	for _, args := range commands {
		code, out, errOut := kubectl(t, adminUser, ns, "", args...)
		got := fmt.Sprintf("exit %d\n%s%s", code, out, errOut)
		if want := before[strings.Join(args, " ")]; got != want {
			t.Errorf("%v once the task was archived and deleted:\n%s\nwant:\n%s", args, got, want)
		}
	}
}

// observedNow gives every observation of the namespace's intents the time it was
// made, as the controller records it: only an observed call is archived.
func observedNow(t *testing.T, ns string) {
	t.Helper()
	var intents v1.ToolIntentList
	if err := env.Client.List(t.Context(), &intents, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range intents.Items {
		in := &intents.Items[i]
		if o := in.Status.Observation; o != nil && o.ObservedAt == nil {
			now := metav1.Now()
			o.ObservedAt = &now
			if err := env.Client.Status().Update(t.Context(), in); err != nil {
				t.Fatal(err)
			}
		}
	}
}
