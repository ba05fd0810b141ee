package controller

import (
	"context"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// cancelIntent sets spec.cancel on an intent, as its proposer does.
func (p *pipelineEnv) cancelIntent(name string) {
	p.t.Helper()
	intent := &v1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name}}
	if err := env.Client.Patch(context.Background(), intent, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancel":true}}`))); err != nil {
		p.t.Fatalf("cancelling %s: %v", name, err)
	}
}

// A call its proposer withdrew before the controller decided it is never decided
// and never runs; its observation says nothing ran and who cancelled it.
func TestIntentCancelledBeforeItIsDecided(t *testing.T) {
	p := startPipeline(t)
	p.task("c", v1.ModeEdit)
	intent := &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "c-t0-0"},
		Spec: v1.ToolIntentSpec{
			TaskRef: v1.LocalObjectReference{Name: "c"}, Tool: v1.ToolReadFile,
			Input: runtime.RawExtension{Raw: []byte(`{"path":"src/app.sh"}`)}, RequestedBy: testProposer, Cancel: true,
		},
	}
	if err := env.Client.Create(t.Context(), intent); err != nil {
		t.Fatal(err)
	}
	got := p.observed("c-t0-0")
	expectObservation(t, got, v1.OutcomeAborted, false, -1, "[not executed] Nothing was run for this call.",
		"The call was cancelled by "+testProposer+" (spec.cancel on ToolIntent c-t0-0) before it ran")
	if got.Status.Decision != nil {
		t.Errorf("a cancelled call was decided: %+v", got.Status.Decision)
	}
	p.waitEvents("c-t0-0", toolintent.EventCancelled, toolintent.EventObserved)
	p.absent(p.wasObserved("c-t0-0"), "an Execution for a cancelled call", func() bool { return p.countExecutions() > 0 })
}

// A call waiting for a human when its proposer cancels it never runs: its Approval
// is retired (Superseded), and a decision given after it changes nothing.
func TestIntentCancelledWhileItWaitsForApproval(t *testing.T) {
	p := startPipeline(t)
	p.task("c", v1.ModeEdit)
	p.propose("c", 0, 0, v1.ToolBash, `{"command":"npm install x"}`)
	p.approval("c-t0-0")
	p.cancelIntent("c-t0-0")

	expectObservation(t, p.observed("c-t0-0"), v1.OutcomeAborted, false, -1, "[not executed]",
		"cancelled by "+testProposer+" (spec.cancel on ToolIntent c-t0-0) before it ran")
	a := p.approval("c-t0-0")
	if a.Status.State != v1.ApprovalStateSuperseded {
		t.Fatalf("the cancelled call's Approval: %+v, want Superseded", a.Status)
	}
	mustContain(t, "approval message", a.Status.Message, "cancelled by "+testProposer)
	p.decide("c-t0-0", v1.DecisionApproved, "bob", "too late")
	p.absent(p.reconciledNow("toolintent", p.getIntent("c-t0-0")), "an Execution for a cancelled call", func() bool { return p.countExecutions() > 0 })
	if a := p.approval("c-t0-0"); a.Status.State != v1.ApprovalStateSuperseded {
		t.Errorf("after a late approve: %+v, want Superseded still", a.Status)
	}
}

// A call that runs when its proposer cancels it is stopped as a task's cancel stops
// it: its Job is deleted in the foreground, the Execution ends Aborted, and the
// observation says it was aborted, by whom, and that the workspace may be partly
// changed. Another call of the same task runs on.
func TestIntentCancelledWhileItRuns(t *testing.T) {
	p := startPipeline(t)
	p.task("a", v1.ModeEdit)
	jobA := p.startRunning("a")
	other := p.startRunningAt("a", 1)
	t.Cleanup(func() {
		job := &batchv1.Job{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(jobA), job); err == nil &&
			controllerutil.RemoveFinalizer(job, metav1.FinalizerDeleteDependents) {
			_ = env.Client.Update(context.Background(), job)
		}
	})

	p.cancelIntent("a-t0-0")

	p.eventually("Job a-t0-0 deleted in the foreground", func() (bool, string) {
		job := &batchv1.Job{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(jobA), job); err != nil {
			return false, err.Error()
		}
		return job.DeletionTimestamp != nil && controllerutil.ContainsFinalizer(job, metav1.FinalizerDeleteDependents), fmt.Sprintf("deletionTimestamp %v", job.DeletionTimestamp)
	})
	obs := p.observed("a-t0-0").Status.Observation
	if obs.Outcome != v1.OutcomeAborted || !obs.Executed {
		t.Fatalf("observation of the cancelled call: %+v, want Aborted and executed", obs)
	}
	mustContain(t, "summary", obs.Summary, "[aborted: the execution was stopped before it finished; it may have had effects]",
		"cancelled by "+testProposer+" (spec.cancel on ToolIntent a-t0-0) while it ran", "the workspace may be partly changed")

	p.absent(p.reconciledNow("execution", getExecution(t, p.ns, "a-t1-0")), "the other call's Job deleted", func() bool {
		job := &batchv1.Job{}
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(other), job)
		return err != nil || job.DeletionTimestamp != nil
	})
	if task := p.getTask("a"); task.IsCancelled() {
		t.Error("the task was cancelled")
	}
}

// A cancel that comes after the observation changes nothing.
func TestIntentCancelledAfterItsObservation(t *testing.T) {
	p := startPipeline(t)
	p.task("r", v1.ModeReadOnly)
	p.propose("r", 0, 0, v1.ToolBash, `{"command":"rm -rf /"}`)
	before := p.observed("r-t0-0").Status.Observation
	p.cancelIntent("r-t0-0")
	p.absent(p.reconciledNow("toolintent", p.getIntent("r-t0-0")), "the observation changed", func() bool {
		now := p.getIntent("r-t0-0").Status.Observation
		return now == nil || now.Outcome != before.Outcome || now.Summary != before.Summary
	})
}
