package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// +kubebuilder:rbac:groups=toolgate.dev,resources=toolintents;approvals;executions;agenttasks,verbs=delete

// Retention (docs/archive.md): a finished call leaves the cluster, with its
// Approval and Execution (and, by garbage collection, its Job), once the archive
// holds its record and its window has passed; an ended task leaves after its TTL,
// once all its calls have and the archive holds its own record. The AgentTask
// reconciler does both: it owns the task's status, where the retired calls are
// counted (status.history) before they are deleted.
//
// "The archive holds the record" is asked of the archive itself, never of the
// archived label (which anyone who may patch an intent can set): the record is
// built again from the cluster and stored, which stores nothing when the archive
// holds the same record, and fails when it holds another (archive.ErrChanged) or
// cannot answer. Only then is anything deleted.

// DefaultCallRetention keeps a finished call an hour after its observation: long
// enough for kubectl and the Events of the call (which expire after an hour), short
// enough that etcd holds an hour of calls, not their whole history.
const DefaultCallRetention = time.Hour

// DefaultTaskTTLAfterFinished keeps an ended task a day.
const DefaultTaskTTLAfterFinished = 24 * time.Hour

// retentionConfirmBudget bounds the archive's confirmations in one reconcile of a
// task, so that a slow archive delays the task's status by this much at most.
const retentionConfirmBudget = 10 * time.Second

// archiveRetryAfter is how long retention leaves a failing archive alone before
// it asks it again.
const archiveRetryAfter = 30 * time.Second

func (o Options) callRetention() time.Duration {
	if o.CallRetention > 0 {
		return o.CallRetention
	}
	return DefaultCallRetention
}

func (o Options) taskTTL(task *v1.AgentTask) time.Duration {
	if t := task.Spec.TTLSecondsAfterFinished; t != nil {
		return time.Duration(*t) * time.Second
	}
	if o.TaskTTLAfterFinished > 0 {
		return o.TaskTTLAfterFinished
	}
	return DefaultTaskTTLAfterFinished
}

// retirable returns the calls of the task to retire now, those the archive
// confirmed (whole turns, in order), what the Archived condition says, and when to
// look again.
func (r *AgentTaskReconciler) retirable(ctx context.Context, task *v1.AgentTask, intents []v1.ToolIntent, push *pipeline.PushWorld) (pipeline.ArchiveWorld, []v1.ToolIntent, time.Duration) {
	live := pipeline.LiveIntents(pipeline.Forget(task.Status.History, intents), intents)
	var pushName string
	if push != nil && push.Intent != nil {
		pushName = push.Intent.Name
	}
	calls, wait := pipeline.RetirableCalls(task, live, pushName, r.Options.callRetention(), r.Now())
	if r.Options.Archive == nil {
		// Nothing leaves without an archive to hold it; the metric says how much
		// would have, so history growing in etcd shows on a dashboard, not only
		// in each task's Archived condition. No look again is scheduled for it.
		if len(calls) > 0 {
			metrics.RetentionHeld.WithLabelValues(v1.ReasonNoArchive).Add(float64(len(calls)))
		}
		return pipeline.ArchiveWorld{}, nil, 0
	}
	world := pipeline.ArchiveWorld{Configured: true}
	if len(calls) == 0 {
		return world, nil, wait
	}
	if failed, err := r.archiveFailed(); err != nil {
		metrics.RetentionHeld.WithLabelValues(v1.ReasonArchiveUnavailable).Add(float64(len(calls)))
		world.Unavailable = err.Error()
		return world, nil, archiveRetryAfter - r.Now().Sub(failed)
	}
	ctx, cancel := context.WithTimeout(ctx, retentionConfirmBudget)
	defer cancel()
	turnStart := 0
	for i := range calls {
		if i > 0 && calls[i].Spec.Turn != calls[i-1].Spec.Turn {
			turnStart = i
		}
		full, err := r.confirmArchived(ctx, &calls[i])
		if err == nil {
			// The cache keeps a finished intent trimmed (trimCachedIntent): what
			// the history keeps of it (a denied call's fingerprint) is read whole.
			calls[i] = *full
		} else {
			r.noteArchiveFailure(err)
			metrics.RetentionHeld.WithLabelValues(v1.ReasonArchiveUnavailable).Add(float64(len(calls) - turnStart))
			world.Unavailable = err.Error()
			// A turn retires whole or not at all.
			return world, calls[:turnStart], archiveRetryAfter
		}
	}
	return world, calls, 0
}

// confirmArchived stores the call's record again, built from the intent as the API
// server holds it, which stores nothing when the archive holds the same record and
// fails when it holds another or cannot answer. It returns the intent read.
func (r *AgentTaskReconciler) confirmArchived(ctx context.Context, cached *v1.ToolIntent) (*v1.ToolIntent, error) {
	intent := &v1.ToolIntent{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), intent); err != nil {
		return nil, fmt.Errorf("reading ToolIntent %s to confirm its record: %w", cached.Name, err)
	}
	if intent.UID != cached.UID {
		return nil, fmt.Errorf("ToolIntent %s was replaced while its record was confirmed", cached.Name)
	}
	rec, err := callRecord(ctx, r.Client, r.APIReader, intent)
	if err != nil {
		return nil, err
	}
	err = storeRecord(ctx, r.Options.Archive, rec, r.Now())
	if errors.Is(err, archive.ErrChanged) {
		return nil, fmt.Errorf("the archive holds another record of ToolIntent %s (uid %s) than the cluster: the call stays; compare them with kubectl toolgate audit verify %s", intent.Name, intent.UID, intent.Spec.TaskRef.Name)
	}
	return intent, err
}

// archiveFailed returns when the archive last failed retention, and why, while
// archiveRetryAfter has not passed since.
func (r *AgentTaskReconciler) archiveFailed() (time.Time, error) {
	r.archiveMu.Lock()
	defer r.archiveMu.Unlock()
	if r.archiveErr != nil && r.Now().Sub(r.archiveErrAt) < archiveRetryAfter {
		return r.archiveErrAt, r.archiveErr
	}
	return time.Time{}, nil
}

func (r *AgentTaskReconciler) noteArchiveFailure(err error) {
	r.archiveMu.Lock()
	defer r.archiveMu.Unlock()
	r.archiveErr, r.archiveErrAt = err, r.Now()
}

// deleteRetired deletes the calls task's status.history lists as retiring and
// intents still holds: the Approval and the Execution the intent controls, then
// the intent. Each delete names the UID it read, so an object of the same name
// made since is never deleted. The history was written first: a call deleted is
// always counted.
func (r *AgentTaskReconciler) deleteRetired(ctx context.Context, task *v1.AgentTask, intents []v1.ToolIntent) error {
	h := task.Status.History
	if h == nil || len(h.Retiring) == 0 {
		return nil
	}
	byUID := make(map[string]*v1.ToolIntent, len(intents))
	for i := range intents {
		byUID[string(intents[i].UID)] = &intents[i]
	}
	for _, ri := range h.Retiring {
		in := byUID[ri.UID]
		if in == nil || !in.DeletionTimestamp.IsZero() {
			continue
		}
		failpoint.Reached(failpoint.RetireCounted)
		if err := r.deleteChild(ctx, in, in.Status.ApprovalName, &v1.Approval{}); err != nil {
			return err
		}
		if err := r.deleteChild(ctx, in, in.Status.ExecutionName, &v1.Execution{}); err != nil {
			return err
		}
		failpoint.Reached(failpoint.RetireChildrenDeleted)
		if err := r.deleteOnce(ctx, in); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("retired a call", "audit", true, "step", "Retired", "namespace", in.Namespace, "task", task.Name,
			"intent", in.Name, "uid", in.UID, "approval", in.Status.ApprovalName, "execution", in.Status.ExecutionName)
	}
	return nil
}

// deleteChild deletes the object of that name when intent controls it.
func (r *AgentTaskReconciler) deleteChild(ctx context.Context, intent *v1.ToolIntent, name string, obj client.Object) error {
	if name == "" {
		return nil
	}
	if err := r.Get(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: name}, obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(obj, intent) {
		return nil
	}
	return r.deleteOnce(ctx, obj)
}

// deleteOnce deletes obj as read (a UID precondition), in the background: the
// garbage collector takes what it owns (an Execution's Job).
func (r *AgentTaskReconciler) deleteOnce(ctx context.Context, obj client.Object) error {
	uid := obj.GetUID()
	err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
	}
	gvk, _ := r.GroupVersionKindFor(obj)
	metrics.Retired.WithLabelValues(gvk.Kind).Inc()
	return nil
}

// expire deletes an ended task whose TTL passed, once every call of it left the
// cluster (intents lists none) and the archive holds the task's own record, stored
// now, after its calls', with its final status. It returns when to look again, or
// that the task is gone.
func (r *AgentTaskReconciler) expire(ctx context.Context, task *v1.AgentTask, intents []v1.ToolIntent) (wait time.Duration, gone bool, err error) {
	ended := pipeline.EndedAt(task.Status.Conditions)
	if r.Options.Archive == nil || ended == nil || len(intents) > 0 || task.Status.ObservedGeneration != task.Generation {
		return 0, false, nil
	}
	if wait := ended.Add(r.Options.taskTTL(task)).Sub(r.Now()); wait > 0 {
		return wait, false, nil
	}
	if failed, err := r.archiveFailed(); err != nil {
		return archiveRetryAfter - r.Now().Sub(failed), false, nil
	}
	rec, err := taskRecord(ctx, r.APIReader, task)
	if err != nil {
		return 0, false, err
	}
	if err := storeRecord(ctx, r.Options.Archive, rec, r.Now()); err != nil {
		r.noteArchiveFailure(err)
		r.Recorder.Eventf(task, nil, corev1.EventTypeWarning, EventTaskKept, EventTaskKept, "the task's TTL passed, and it stays: %v", err)
		return archiveRetryAfter, false, nil
	}
	failpoint.Reached(failpoint.TaskRecordStored)
	if err := r.deleteOnce(ctx, task); err != nil {
		return 0, false, err
	}
	ctrl.LoggerFrom(ctx).Info("deleted an ended task after its TTL", "audit", true, "step", "Expired", "namespace", task.Namespace, "task", task.Name, "uid", task.UID)
	return 0, true, nil
}
