package controller

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/protocol"
)

// spentJobTTL is short, so that the tests below see a spent Job reaped.
func spentJobTTL(o *Options) { o.SpentJobTTL = 300 * time.Millisecond }

func (p *pipelineEnv) jobExists(name string) bool {
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, &batchv1.Job{})
	if err != nil && !apierrors.IsNotFound(err) {
		p.t.Fatal(err)
	}
	return err == nil
}

// runSpentCall runs task t's call t-t0-0 (a read_file) to a whole result of output
// and waits until its spent Job was deleted.
func (p *pipelineEnv) runSpentCall(output string) {
	p.t.Helper()
	p.propose("t", 0, 0, v1.ToolReadFile, `{"path":"a.txt"}`)
	p.runJob("t-t0-0", protocol.Result{ExitCode: 0}, output)
	p.observed("t-t0-0")
	p.eventually("the spent Job deleted", func() (bool, string) {
		return !p.jobExists("t-t0-0"), "the Job still exists"
	})
}

// A call whose Execution holds its whole result (exit code and all the output) loses
// its Job once the spent-Job TTL passed; the record stays. One whose output was
// truncated keeps its Job: the full output is only in its pod's log.
func TestSpentJobIsReaped(t *testing.T) {
	p := startPipeline(t, spentJobTTL)
	p.task("t", v1.ModeEdit)
	p.runSpentCall("whole\n")
	exec := getExecution(t, p.ns, "t-t0-0")
	if !executor.HoldsWholeResult(&exec.Status) || exec.Status.Output != "whole\n" || exec.Status.JobName != "t-t0-0" {
		t.Fatalf("the Execution lost its record with its Job: %+v", exec.Status)
	}
	if obs := p.getIntent("t-t0-0").Status.Observation; obs == nil || obs.Outcome != v1.OutcomeSucceeded {
		t.Fatalf("observation: %+v", obs)
	}

	p.propose("t", 1, 0, v1.ToolReadFile, `{"path":"big.txt"}`)
	p.runJob("t-t1-0", protocol.Result{ExitCode: 0, Truncated: true}, "head ... tail\n")
	p.observed("t-t1-0")
	p.absent(p.reconciledNow("execution", getExecution(t, p.ns, "t-t1-0")), "the Job of a truncated call deleted", func() bool { return !p.jobExists("t-t1-0") })
}

// laggingCache is a cache that still shows an old version of one Execution: what a
// replica whose watch fell behind, or a controller before its restart, reads. A
// real informer cannot be held behind on demand in a test.
type laggingCache struct {
	client.Client
	stale *v1.Execution
}

func (c laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if e, ok := obj.(*v1.Execution); ok && key == client.ObjectKeyFromObject(c.stale) {
		c.stale.DeepCopyInto(e)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// Attack: the Job's name is what stops a second run of a call (a second create gets
// AlreadyExists), and reaping a spent Job frees the name. A controller whose cache
// still shows the Execution as it was before its Job was made must not make the Job
// again: the call ran, finished, and was observed.
func TestSpentJobIsNotMadeAgainByALaggingCache(t *testing.T) {
	p := startPipeline(t, spentJobTTL)
	p.task("t", v1.ModeEdit)
	p.runSpentCall("ran once\n")

	stale := getExecution(t, p.ns, "t-t0-0")
	stale.Status = v1.ExecutionStatus{} // as it was before its Job was made
	opts := testOptions()
	spentJobTTL(&opts)
	r := &ExecutionReconciler{
		Client: laggingCache{Client: env.Client, stale: stale}, APIReader: env.Client, Scheme: env.Scheme,
		Options: opts, Logs: p.logs, Recorder: events.NewFakeRecorder(100), Now: time.Now,
	}
	noSecondJob := func(when string) {
		t.Helper()
		res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(stale)})
		if err != nil {
			t.Fatalf("%s: reconcile: %v", when, err)
		}
		if res.RequeueAfter <= 0 {
			t.Fatalf("%s: a reconcile from a stale Execution must wait for the cache: %+v", when, res)
		}
		var jobs batchv1.JobList
		if err := env.Client.List(t.Context(), &jobs, client.InNamespace(p.ns), client.MatchingLabels{v1.LabelExecution: stale.Name}); err != nil {
			t.Fatal(err)
		}
		if len(jobs.Items) != 0 {
			t.Fatalf("%s: a finished call got a second Job from a lagging cache: %s", when, jobs.Items[0].Name)
		}
	}
	noSecondJob("the Execution finished in the API server")

	// The Execution is gone from the API server while the cache still shows it.
	if err := env.Client.Delete(t.Context(), getExecution(t, p.ns, stale.Name)); err != nil {
		t.Fatal(err)
	}
	p.eventually("the Execution deleted", func() (bool, string) { return !p.executionExists(stale.Name), "it still exists" })
	noSecondJob("the Execution deleted")
}
