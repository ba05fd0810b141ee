package controller

import (
	"context"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// startRunning proposes an allowed read_file into task, plays the Job controller and
// kubelet until the tool container runs, and returns the call's Job.
func (p *pipelineEnv) startRunning(task string) *batchv1.Job {
	p.t.Helper()
	return p.startRunningAt(task, 0)
}

// startRunningAt is startRunning for the call of turn turn.
func (p *pipelineEnv) startRunningAt(task string, turn int32) *batchv1.Job {
	p.t.Helper()
	name := fmt.Sprintf("%s-t%d-0", task, turn)
	p.propose(task, turn, 0, v1.ToolReadFile, `{"path":"src/app.sh"}`)
	job := &batchv1.Job{}
	p.eventually("Job "+name, func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, job)
		return err == nil, fmt.Sprint(err)
	})
	pod := createJobPod(p.t, job)
	setPodStatus(p.t, pod, corev1.PodRunning, running())
	p.eventually("Execution "+name+" running", func() (bool, string) {
		exec := getExecution(p.t, p.ns, name)
		return exec.Status.Phase == v1.ExecutionRunning, fmt.Sprintf("%+v", exec.Status)
	})
	return job
}

// A call that is already running when its task is cancelled is stopped: the task
// deletes its Job (foreground, so the pod goes first and the runner is terminated),
// the Execution ends Aborted, and the model sees an executed, aborted call. A call of
// another task in the same namespace runs on.
func TestCancelStopsRunningCalls(t *testing.T) {
	p := startPipeline(t)
	p.task("a", v1.ModeEdit)
	p.task("b", v1.ModeEdit)
	jobA := p.startRunning("a")
	jobB := p.startRunning("b")
	// envtest runs no garbage collector, so a foreground deletion never completes:
	// drop its finalizer when done so that the namespace can go.
	t.Cleanup(func() {
		job := &batchv1.Job{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(jobA), job); err == nil &&
			controllerutil.RemoveFinalizer(job, metav1.FinalizerDeleteDependents) {
			_ = env.Client.Update(context.Background(), job)
		}
	})

	p.patchTaskSpec("a", map[string]any{"lifecycle": "Cancelled"})

	p.eventually("Job a-t0-0 deleted in the foreground", func() (bool, string) {
		job := &batchv1.Job{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(jobA), job); err != nil {
			return false, err.Error()
		}
		return job.DeletionTimestamp != nil && controllerutil.ContainsFinalizer(job, metav1.FinalizerDeleteDependents), fmt.Sprintf("deletionTimestamp %v, finalizers %v", job.DeletionTimestamp, job.Finalizers)
	})
	p.eventually("Execution a-t0-0 Aborted", func() (bool, string) {
		exec := getExecution(t, p.ns, "a-t0-0")
		return exec.Status.Phase == v1.ExecutionFailed && exec.Status.ErrorKind == v1.ErrorAborted, fmt.Sprintf("%+v", exec.Status)
	})
	obs := p.observed("a-t0-0").Status.Observation
	if obs.Outcome != v1.OutcomeAborted || !obs.Executed {
		t.Fatalf("observation of the stopped call: %+v, want Aborted and executed", obs)
	}
	mustContain(t, "summary", obs.Summary, "[aborted: the execution was stopped before it finished; it may have had effects]")
	p.waitEvents("a-t0-0", toolintent.EventObserved)

	// The other task's call is untouched.
	p.absent(p.reconciledNow("execution", getExecution(t, p.ns, "b-t0-0")), "Job b-t0-0 deleted", func() bool {
		job := &batchv1.Job{}
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(jobB), job)
		return err != nil || job.DeletionTimestamp != nil
	})
	if exec := getExecution(t, p.ns, "b-t0-0"); exec.Status.Phase != v1.ExecutionRunning {
		t.Errorf("Execution of the other task: %+v, want Running", exec.Status)
	}
}
