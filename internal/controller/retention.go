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
// "The archive holds the record" is asked of the archive itself, never of anything
// on the intent: each record names the versions of the objects it was built from
// (archive.Versions), and a call retires when the archive's record is whole and
// names the versions the cluster holds. Each object is then deleted with those
// versions as preconditions, so the API server deletes exactly the versions the
// archive holds a copy of, or nothing. Where the versions differ (a record from
// before versions were kept, an object changed since, a cache behind), the record
// is built again from the API server and stored, which stores nothing when the
// archive holds the same record (it takes the new versions) and fails when it
// holds another (archive.ErrChanged) or cannot answer. Only then is anything
// deleted.

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
	confirmed, err := r.confirmArchived(ctx, calls, false)
	// A turn retires whole or not at all: the calls before the turn of the first
	// call unconfirmed (failed, or gone meanwhile: the next list tells).
	n := 0
	for ; n < len(calls); n++ {
		if _, ok := confirmed[string(calls[n].UID)]; !ok {
			break
		}
	}
	for n > 0 && n < len(calls) && calls[n].Spec.Turn == calls[n-1].Spec.Turn {
		n--
	}
	if err == nil {
		return world, calls[:n], 0
	}
	r.noteArchiveFailure(err)
	world.Unavailable = err.Error()
	metrics.RetentionHeld.WithLabelValues(v1.ReasonArchiveUnavailable).Add(float64(len(calls) - n))
	return world, calls[:n], archiveRetryAfter
}

// confirmArchived returns, for each of the calls it confirmed, the versions of its
// objects the archive holds a whole record of (a call it could not confirm has no
// entry): those the cluster's versions (as the cache has them) match cost nothing more than
// one read of the archive for all; the others are built again from the API server
// and stored (confirmByRecord). err is the first call it could not confirm; a call
// gone from the API server is neither confirmed nor an error. counted says the
// calls are counted in the history already, and some of their Approvals and
// Executions may have been deleted (a restart between the deletes): one gone is
// not compared, as there is nothing of it left to delete.
func (r *AgentTaskReconciler) confirmArchived(ctx context.Context, calls []v1.ToolIntent, counted bool) (map[string]archive.Versions, error) {
	uids := make([]string, len(calls))
	for i := range calls {
		uids[i] = string(calls[i].UID)
	}
	held, err := r.Options.Archive.Current(ctx, uids)
	if err != nil {
		return nil, fmt.Errorf("reading the archive's records of %d calls: %w", len(calls), err)
	}
	versions := make(map[string]archive.Versions, len(calls))
	var first error
	for i := range calls {
		uid := string(calls[i].UID)
		v, ok := held[uid]
		if ok && v == r.cachedVersions(ctx, &calls[i], v, counted) {
			versions[uid] = v
			continue
		}
		if v, err = r.confirmByRecord(ctx, &calls[i]); errors.Is(err, errCallGone) {
			continue
		} else if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		versions[uid] = v
	}
	return versions, first
}

// cachedVersions are the versions of the call's objects as the cache holds them.
// For a counted call, an Approval or Execution gone takes the version recorded:
// it was deleted, and is not compared.
func (r *AgentTaskReconciler) cachedVersions(ctx context.Context, intent *v1.ToolIntent, recorded archive.Versions, counted bool) archive.Versions {
	v := archive.Versions{Object: intent.ResourceVersion}
	child := func(name string, obj client.Object, recorded string) string {
		if name == "" {
			return ""
		}
		err := r.Get(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: name}, obj)
		switch {
		case err == nil:
			return obj.GetResourceVersion()
		case counted && apierrors.IsNotFound(err):
			return recorded
		}
		return ""
	}
	v.Approval = child(intent.Status.ApprovalName, &v1.Approval{}, recorded.Approval)
	v.Execution = child(intent.Status.ExecutionName, &v1.Execution{}, recorded.Execution)
	return v
}

// errCallGone: the call is no longer in the API server.
var errCallGone = errors.New("the call is gone")

// confirmByRecord stores the call's record again, built from its objects as the
// API server holds them, which stores nothing when the archive holds the same
// record (it keeps the versions read) and fails when it holds another or cannot
// answer. It returns the versions read.
func (r *AgentTaskReconciler) confirmByRecord(ctx context.Context, cached *v1.ToolIntent) (archive.Versions, error) {
	intent := &v1.ToolIntent{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), intent)
	if apierrors.IsNotFound(err) || err == nil && intent.UID != cached.UID {
		return archive.Versions{}, errCallGone
	}
	if err != nil {
		return archive.Versions{}, fmt.Errorf("reading ToolIntent %s to confirm its record: %w", cached.Name, err)
	}
	rec, err := callRecord(ctx, r.Client, r.APIReader, intent)
	if err != nil {
		return archive.Versions{}, err
	}
	err = storeRecord(ctx, r.Options.Archive, rec, r.Now())
	if errors.Is(err, archive.ErrChanged) {
		return archive.Versions{}, fmt.Errorf("the archive holds another record of ToolIntent %s (uid %s) than the cluster: the call stays; compare them with kubectl toolgate audit verify %s", intent.Name, intent.UID, intent.Spec.TaskRef.Name)
	}
	return rec.BuiltFrom, err
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
// the intent, each at the version the archive's record was built from (a UID and
// resourceVersion precondition), so an object changed since its record, or made
// since under the same name, is never deleted. One whose version moved is
// confirmed again (confirmArchived) and deleted at its new version on a later
// pass. The history was written first: a call deleted is always counted. It
// returns when to look again: soon when a version moved, later when the archive
// could not confirm.
func (r *AgentTaskReconciler) deleteRetired(ctx context.Context, task *v1.AgentTask, intents []v1.ToolIntent) (time.Duration, error) {
	h := task.Status.History
	// Not held back by a failure noted moments ago (archiveFailed): these calls
	// are counted already, most of them confirmed in this same reconcile, and a
	// record the archive refused for one call says nothing of the others.
	if h == nil || len(h.Retiring) == 0 || r.Options.Archive == nil {
		return 0, nil
	}
	retiring := make(map[string]bool, len(h.Retiring))
	for _, ri := range h.Retiring {
		retiring[ri.UID] = true
	}
	var present []v1.ToolIntent
	for i := range intents {
		if retiring[string(intents[i].UID)] && intents[i].DeletionTimestamp.IsZero() {
			present = append(present, intents[i])
		}
	}
	if len(present) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, retentionConfirmBudget)
	defer cancel()
	versions, confirmErr := r.confirmArchived(ctx, present, true)
	var moved int
	for i := range present {
		in := &present[i]
		v, ok := versions[string(in.UID)]
		if !ok {
			continue // confirmErr says why
		}
		failpoint.Reached(failpoint.RetireCounted)
		done, err := r.deleteChild(ctx, in, in.Status.ApprovalName, v.Approval, &v1.Approval{})
		if err == nil && done {
			done, err = r.deleteChild(ctx, in, in.Status.ExecutionName, v.Execution, &v1.Execution{})
		}
		if err != nil {
			return 0, err
		}
		if !done {
			moved++
			continue
		}
		failpoint.Reached(failpoint.RetireChildrenDeleted)
		if done, err = r.deleteAt(ctx, in, v.Object); err != nil {
			return 0, err
		}
		if !done {
			moved++
			continue
		}
		ctrl.LoggerFrom(ctx).Info("retired a call", "audit", true, "step", "Retired", "namespace", in.Namespace, "task", task.Name,
			"intent", in.Name, "uid", in.UID, "approval", in.Status.ApprovalName, "execution", in.Status.ExecutionName)
	}
	if confirmErr != nil {
		r.noteArchiveFailure(confirmErr)
		ctrl.LoggerFrom(ctx).Info("retiring calls stay until the archive confirms their records", "task", task.Name, "error", confirmErr.Error())
		return archiveRetryAfter, nil
	}
	if moved > 0 {
		// Changed since the record was confirmed, or the cache was behind: the
		// next pass confirms them again, from the API server if need be.
		return time.Second, nil
	}
	return 0, nil
}

// deleteChild deletes the object of that name, at version, when intent controls
// it. done is false when it is there at another version (or at one the archive
// holds no record of: version "").
func (r *AgentTaskReconciler) deleteChild(ctx context.Context, intent *v1.ToolIntent, name, version string, obj client.Object) (done bool, err error) {
	if name == "" {
		return true, nil
	}
	if err := r.Get(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: name}, obj); err != nil {
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(obj, intent) {
		return true, nil
	}
	return r.deleteAt(ctx, obj, version)
}

// deleteAt deletes obj at version (UID and resourceVersion preconditions), in the
// background: the garbage collector takes what it owns (an Execution's Job). done
// is false when obj is there at another version; gone already is done.
func (r *AgentTaskReconciler) deleteAt(ctx context.Context, obj client.Object, version string) (done bool, err error) {
	if version == "" {
		return false, nil
	}
	uid := obj.GetUID()
	err = r.Delete(ctx, obj, client.Preconditions{UID: &uid, ResourceVersion: &version}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsConflict(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
	}
	gvk, _ := r.GroupVersionKindFor(obj)
	metrics.Retired.WithLabelValues(gvk.Kind).Inc()
	return true, nil
}

// deleteOnce deletes obj as read (a UID precondition), in the background.
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
