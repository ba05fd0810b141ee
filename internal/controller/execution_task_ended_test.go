package controller

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// TestLateExecutionOfAnEndedTaskNeverStarts: an Execution whose chain is whole but
// whose task ended (here: cancelled) before its Job was made never gets one, so the
// tool does not start only to be stopped.
func TestLateExecutionOfAnEndedTaskNeverStarts(t *testing.T) {
	startChainExecutionManager(t, 3*time.Second)
	ns := env.Namespace(t)
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "task"},
		Spec: v1.AgentTaskSpec{
			Goal: "stopped before its call ran", Mode: v1.ModeEdit, Lifecycle: v1.LifecycleCancelled,
			Workspace: v1.WorkspaceSpec{ExistingClaim: "task-workspace"},
			Agent:     v1.AgentSpec{External: externalAgent()},
		},
	}
	if err := env.Client.Create(t.Context(), task); err != nil {
		t.Fatalf("creating task: %v", err)
	}
	exec := fixtures.Execution(ns, "late")
	createExecution(t, exec)
	waitRefused(t, ns, "late", EventChainBroken, "AgentTask task ended before this call started (it was cancelled)")
	noJobs(t, ns)
}

// TestLateExecutionOfATaskBeingDeletedNeverStarts: the same for a task whose deletion
// has begun (held here by a finalizer, as an orphaning or foreground deletion holds
// it): a call that has not started never does.
func TestLateExecutionOfATaskBeingDeletedNeverStarts(t *testing.T) {
	startChainExecutionManager(t, 3*time.Second)
	ns := env.Namespace(t)
	const hold = "test.toolgate.dev/hold"
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "task", Finalizers: []string{hold}},
		Spec: v1.AgentTaskSpec{
			Goal: "deleted before its call ran", Mode: v1.ModeEdit,
			Workspace: v1.WorkspaceSpec{ExistingClaim: "task-workspace"},
			Agent:     v1.AgentSpec{External: externalAgent()},
		},
	}
	if err := env.Client.Create(t.Context(), task); err != nil {
		t.Fatalf("creating task: %v", err)
	}
	t.Cleanup(func() {
		got := &v1.AgentTask{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(task), got); err == nil {
			got.Finalizers = nil
			_ = env.Client.Update(context.Background(), got)
		}
	})
	if err := env.Client.Delete(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	exec := fixtures.Execution(ns, "late")
	createExecution(t, exec)
	waitRefused(t, ns, "late", EventChainBroken, "AgentTask task ended before this call started (it is being deleted)")
	noJobs(t, ns)
}
