package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/metrics"
)

// +kubebuilder:rbac:groups=toolgate.dev,resources=toolintents,verbs=get;list;watch;patch

// ArchiveReconciler stores the record of every finished call in the archive
// (internal/archive), with the versions of the objects it was built from. It runs
// beside the pipeline, never in it: a call never waits for the archive, and an
// archive that is down, slow or refusing only delays the records, which are stored
// when it answers again (the work queue's backoff). It writes nothing to the
// cluster: a mark on the intent would be one more write per call, and would change
// the intent's version after its record was built from it (retention compares
// those versions, retention.go).
type ArchiveReconciler struct {
	client.Client
	// APIReader reads the call's Approval and Execution around the cache, which
	// keeps no finished Execution's output.
	APIReader client.Reader
	Archive   *archive.Archive
	Now       func() time.Time
}

// archiveTimeout bounds one store: a slow archive holds a worker this long at most.
const archiveTimeout = 30 * time.Second

// archiveWorkers store records side by side: a store waits on the API server and
// the database, not on this process's CPU.
const archiveWorkers = 4

func setupArchive(mgr ctrl.Manager, opts Options) error {
	if opts.Archive == nil {
		return nil
	}
	r := &ArchiveReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Archive: opts.Archive, Now: time.Now}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.ToolIntent{}, builder.WithPredicates(awaitsArchive)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: archiveWorkers}).
		Named("archive").
		Complete(r)
}

// awaitsArchive passes the observed intents.
var awaitsArchive = predicate.NewPredicateFuncs(needsArchiving)

func needsArchiving(o client.Object) bool {
	in, ok := o.(*v1.ToolIntent)
	return ok && in.Status.Observation != nil && meta.IsStatusConditionTrue(in.Status.Conditions, v1.ConditionObserved)
}

// Reconcile stores one finished call's record, unless the archive holds it.
func (r *ArchiveReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	intent := &v1.ToolIntent{}
	if err := r.Get(ctx, req.NamespacedName, intent); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !needsArchiving(intent) {
		return ctrl.Result{}, nil
	}
	// Asked of the archive, by UID: a later event of the call (or every call
	// again, after a restart) costs one indexed read, not the call read whole.
	// Whether the record is still the call's is retention's question, asked
	// before anything is deleted.
	if stored, err := r.archived(ctx, intent); err != nil || stored {
		return ctrl.Result{}, err
	}
	// The cache keeps a finished intent trimmed (trimCachedIntent: no validation,
	// a decision without its parts and walls): the record is the whole intent,
	// read from the API server.
	if err := r.APIReader.Get(ctx, req.NamespacedName, intent); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !needsArchiving(intent) {
		return ctrl.Result{}, nil
	}
	rec, err := callRecord(ctx, r.Client, r.APIReader, intent)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := storeRecord(ctx, r.Archive, rec, r.Now()); err != nil {
		return ctrl.Result{}, err
	}
	failpoint.Reached(failpoint.ArchiveStored)
	ctrl.LoggerFrom(ctx).V(2).Info("archived", "toolintent", klog.KObj(intent))
	return ctrl.Result{}, nil
}

// archived asks the archive whether it holds the intent's record, bounded by
// archiveTimeout; a failure is counted as a store's is.
func (r *ArchiveReconciler) archived(ctx context.Context, intent *v1.ToolIntent) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, archiveTimeout)
	defer cancel()
	stored, err := r.Archive.Has(ctx, string(intent.UID))
	if err != nil {
		metrics.ArchiveFailures.Inc()
		return false, fmt.Errorf("asking the archive for the record of ToolIntent %s/%s: %w", intent.Namespace, intent.Name, err)
	}
	return stored, nil
}

// storeRecord stores rec, bounded by archiveTimeout, and counts it: a record
// stored (once, however often it is written again), its lag from its object's end,
// or a failure, which the caller's work queue retries with backoff.
func storeRecord(ctx context.Context, a *archive.Archive, rec archive.Record, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, archiveTimeout)
	defer cancel()
	_, created, err := a.Store(ctx, rec)
	if err != nil {
		metrics.ArchiveFailures.Inc()
		return fmt.Errorf("storing the record of %s %s/%s: %w", rec.Kind, rec.Namespace, rec.Name, err)
	}
	if created {
		metrics.ArchiveStored.WithLabelValues(string(rec.Kind)).Inc()
		metrics.ArchiveLag.Observe(now.Sub(rec.RecordedAt).Seconds())
	}
	return nil
}

// callRecord builds the intent's record with its Approval and Execution, read from
// the API server (the cache keeps no finished Execution's output).
func callRecord(ctx context.Context, cache, api client.Reader, intent *v1.ToolIntent) (archive.Record, error) {
	var approval *v1.Approval
	if name := intent.Status.ApprovalName; name != "" {
		a := &v1.Approval{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: name}, a); err == nil {
			approval = a
		} else if !apierrors.IsNotFound(err) {
			return archive.Record{}, err
		}
	}
	var exec *v1.Execution
	if name := intent.Status.ExecutionName; name != "" {
		e := &v1.Execution{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: name}, e); err == nil {
			exec = e
		} else if !apierrors.IsNotFound(err) {
			return archive.Record{}, err
		}
	}
	return archive.CallRecord(callTaskUID(ctx, cache, intent), intent, approval, exec)
}

// callTaskUID is the UID of the task the call belongs to: the one its decision
// recorded, else its owner's, else the task's as it is now ("" when there is none:
// a call of a task that never existed is a chain of its own).
func callTaskUID(ctx context.Context, cache client.Reader, intent *v1.ToolIntent) string {
	if d := intent.Status.Decision; d != nil && d.Sandbox != nil {
		return d.Sandbox.TaskUID
	}
	for _, o := range intent.OwnerReferences {
		if o.Kind == "AgentTask" && o.Name == intent.Spec.TaskRef.Name {
			return string(o.UID)
		}
	}
	task := &v1.AgentTask{}
	if err := cache.Get(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: intent.Spec.TaskRef.Name}, task); err == nil {
		return string(task.UID)
	}
	return "none/" + intent.Namespace + "/" + intent.Spec.TaskRef.Name
}
