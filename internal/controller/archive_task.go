package controller

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/transcript"
)

// TaskArchiveReconciler stores the record of every task that ended (its goal, mode
// and final status, its turn records, completion checks and push). Unlike a call,
// the task is not marked: marking it would need the right to patch AgentTasks,
// which would let the controller change what a task's owner wrote. A task that
// ended changes seldom, and storing its record again stores nothing (by UID).
type TaskArchiveReconciler struct {
	client.Client
	// APIReader reads the turn records and the push record around the cache, which
	// holds no ConfigMap of a task's record.
	APIReader client.Reader
	Archive   *archive.Archive
}

func setupTaskArchive(mgr ctrl.Manager, opts Options) error {
	if opts.Archive == nil {
		return nil
	}
	r := &TaskArchiveReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Archive: opts.Archive}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.AgentTask{}, builder.WithPredicates(taskAwaitsArchive)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 1}).
		Named("archive-task").
		Complete(r)
}

// taskAwaitsArchive passes the tasks whose status records their end (stored
// already or not: storing again stores nothing).
var taskAwaitsArchive = predicate.NewPredicateFuncs(taskNeedsArchiving)

func taskNeedsArchiving(o client.Object) bool {
	task, ok := o.(*v1.AgentTask)
	if !ok {
		return false
	}
	// The record waits for the final status: the end recorded in it, for the
	// task's current spec.
	return pipeline.EndedBy(task.Status.Conditions) != "" && task.Status.ObservedGeneration == task.Generation
}

// Reconcile stores one ended task's record.
func (r *TaskArchiveReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	task := &v1.AgentTask{}
	if err := r.Get(ctx, req.NamespacedName, task); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !taskNeedsArchiving(task) {
		return ctrl.Result{}, nil
	}
	turns, checks, _, err := transcript.Read(ctx, r.APIReader, task)
	if err != nil {
		return ctrl.Result{}, err
	}
	push, err := r.pushRecord(ctx, task)
	if err != nil {
		return ctrl.Result{}, err
	}
	rec, err := archive.TaskRecord(task, turns, checks, push)
	if err != nil {
		return ctrl.Result{}, err
	}
	stored, err := storeRecord(ctx, r.Archive, rec, time.Now())
	if err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).V(2).Info("archived", "agentTask", klog.KObj(task), "seq", stored.Seq)
	return ctrl.Result{}, nil
}

// pushRecord is the change the task recorded for its push, nil when it recorded
// none (or the record is not the task's).
func (r *TaskArchiveReconciler) pushRecord(ctx context.Context, task *v1.AgentTask) (*gitws.Record, error) {
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: task.Namespace, Name: pipeline.PushRecordName(task.Name)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec gitws.Record
	if !transcript.ControlledByTask(cm, task) || json.Unmarshal([]byte(cm.Data[gitws.RecordKey]), &rec) != nil {
		return nil, nil
	}
	return &rec, nil
}
