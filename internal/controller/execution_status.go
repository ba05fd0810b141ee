package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/mask"
)

// writeStatus projects obs into the Execution's status and writes it when it
// changed. It returns the status before the write, nil when there was nothing to
// write, and whether the write conflicted (someone else wrote first: the watch
// brings the new version back, and nothing that follows a write may happen).
func (r *ExecutionReconciler) writeStatus(ctx context.Context, log logr.Logger, exec *toolgatev1alpha1.Execution, obs executor.Observation) (*toolgatev1alpha1.ExecutionStatus, bool, error) {
	status := executor.Project(exec, obs, r.Now())
	if equality.Semantic.DeepEqual(status, exec.Status) {
		return nil, false, nil
	}
	before := exec.Status.DeepCopy()
	exec.Status = status
	if err := r.Status().Update(ctx, exec); err != nil {
		if apierrors.IsConflict(err) {
			log.V(2).Info("status write conflicted; requeueing")
			return nil, true, nil
		}
		return nil, false, err
	}
	return before, false, nil
}

// conflictRequeue is the result of a reconcile that wrote nothing: a second later
// after a conflict, else none.
func conflictRequeue(conflicted bool) ctrl.Result {
	if conflicted {
		return ctrl.Result{RequeueAfter: time.Second}
	}
	return ctrl.Result{}
}

// maxEventNote is the API server's limit on an event's note.
const maxEventNote = 1024

// recordSteps emits an event and one audit log line for each step the status write
// just recorded.
func (r *ExecutionReconciler) recordSteps(log logr.Logger, exec *toolgatev1alpha1.Execution, before *toolgatev1alpha1.ExecutionStatus, job *batchv1.Job, createdJob bool, refused *refusal) {
	var related runtime.Object
	if job != nil {
		related = job
	}
	after := &exec.Status
	step := func(eventType, reason, note string, kv ...any) {
		log.Info("execution step", append([]any{"step", reason, "phase", after.Phase}, kv...)...)
		if eventType == corev1.EventTypeNormal {
			// A call that goes as it should is told once, by its intent's Observed
			// event; its Execution's steps are in its status and the audit log. An
			// event each would be three more writes for every call. Refusals and
			// failures are Warnings, and are sent.
			return
		}
		note = mask.Secrets(note)
		if len(note) > maxEventNote {
			// events.k8s.io refuses longer notes; the status has the whole message.
			note = strings.ToValidUTF8(note[:maxEventNote-3], "") + "..."
		}
		r.Recorder.Eventf(exec, related, eventType, reason, reason, "%s", note)
	}
	if before.Phase == "" {
		step(corev1.EventTypeNormal, EventExecutionCreated, fmt.Sprintf("running tool %s", exec.Spec.Tool), "tool", exec.Spec.Tool)
	}
	if refused != nil {
		step(corev1.EventTypeWarning, refused.reason, "not run: "+refused.Error())
	}
	if createdJob {
		step(corev1.EventTypeNormal, EventJobCreated, fmt.Sprintf("created Job %s to run tool %s", job.Name, exec.Spec.Tool))
	}
	if after.Phase == toolgatev1alpha1.ExecutionRunning && before.Phase != toolgatev1alpha1.ExecutionRunning {
		step(corev1.EventTypeNormal, EventStarted, fmt.Sprintf("pod %s started the tool", after.PodName), "pod", after.PodName)
	}
	if executor.IsFinished(after) {
		eventType, note := corev1.EventTypeNormal, fmt.Sprintf("%s exited 0 in %s", exec.Spec.Tool, time.Duration(after.DurationMillis)*time.Millisecond)
		if after.Phase != toolgatev1alpha1.ExecutionSucceeded {
			eventType, note = corev1.EventTypeWarning, fmt.Sprintf("%s failed (%s): %s", exec.Spec.Tool, after.ErrorKind, after.Message)
		}
		var exitCode any
		if after.ExitCode != nil {
			exitCode = *after.ExitCode
		}
		step(eventType, EventFinished, note, "pod", after.PodName, "exitCode", exitCode, "errorKind", after.ErrorKind,
			"durationMillis", after.DurationMillis, "outputBytes", after.StdoutBytes+after.StderrBytes, "truncated", after.Truncated)
	}
}
