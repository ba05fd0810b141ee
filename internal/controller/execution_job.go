package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// errStaleExecution: the cached Execution is behind the API server's; the reconcile
// is retried once the cache caught up.
var errStaleExecution = errors.New("stale Execution")

// reconcileJob moves a call that runs as a Job forward: the chain is checked until
// the Job exists, then the Job is made behind its NetworkPolicy (runJob), and the
// Job, its pod and the runner's result are read into the status, written once.
func (r *ExecutionReconciler) reconcileJob(ctx context.Context, exec *toolgatev1alpha1.Execution) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var (
		obs        executor.Observation
		createdJob bool
	)
	// The chain is checked until the Job exists: once the Job was created, the
	// Execution was authorized, and what runs is only observed.
	if exec.Status.JobName == "" {
		wait, refused, err := r.authorize(ctx, exec)
		if err != nil {
			return ctrl.Result{}, err
		}
		if wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if refused != nil {
			obs = executor.Observation{BuildError: refused}
		}
	}
	if obs.BuildError == nil {
		var err error
		if obs, createdJob, err = r.runJob(ctx, exec); errors.Is(err, errStaleExecution) {
			log.V(1).Info("not making the Job yet", "why", err.Error())
			return ctrl.Result{RequeueAfter: time.Second}, nil
		} else if err != nil {
			return ctrl.Result{}, err
		}
	}
	before, conflicted, err := r.writeStatus(ctx, log, exec, obs)
	if err != nil || conflicted || before == nil {
		return conflictRequeue(conflicted), err
	}
	if executor.IsFinished(&exec.Status) {
		failpoint.Reached(failpoint.ResultRead)
	}
	var refused *refusal
	errors.As(obs.BuildError, &refused)
	r.recordSteps(log, exec, before, obs.Job, createdJob, refused)
	return ctrl.Result{}, nil
}

// runJob runs a PerCall Execution: it makes sure the NetworkPolicy fence, then the
// Job, exist (and that no other policy widens the fence), and reads what the status is
// projected from. createdJob is true when this call created the Job.
func (r *ExecutionReconciler) runJob(ctx context.Context, exec *toolgatev1alpha1.Execution) (obs executor.Observation, createdJob bool, err error) {
	job, err := executor.BuildJob(exec, r.Options.RunnerImage)
	if err != nil {
		return executor.Observation{BuildError: err}, false, nil
	}
	policy, err := executor.BuildNetworkPolicy(exec)
	if err != nil {
		return executor.Observation{BuildError: err}, false, nil
	}
	obs.JobCreated = exec.Status.JobName != ""

	// The NetworkPolicy comes first, so that the pod never runs without it; one
	// deleted or changed while the call runs is made again, or refused (a watch on
	// NetworkPolicies wakes the calls behind it, executionsBehind). A Job made before
	// pods were fenced by LabelNetwork runs behind the NetworkPolicy made for it then.
	if r.fencedByNetworkKey(ctx, exec, obs.JobCreated) {
		if refused, err := ensureNetworkPolicy(ctx, r.Client, r.APIReader, policy); err != nil {
			return obs, false, err
		} else if refused != nil {
			return executor.Observation{BuildError: refused}, false, nil
		}
	}
	if !obs.JobCreated {
		if refused, err := r.jobWallsWidened(ctx, job, policy); err != nil {
			return obs, false, err
		} else if refused != nil {
			return executor.Observation{BuildError: refused}, false, nil
		}
	}
	obs.Job, createdJob, err = r.ensureJob(ctx, exec, job, obs.JobCreated)
	if err != nil {
		return obs, false, err
	}
	if obs.Job != nil {
		// A Job found by name is this Execution's only when the Execution controls
		// it (by UID) and it carries the labels its pod is found by; anything else is
		// never read as this Execution's result.
		if refused := jobInTheWay(exec, obs.Job); refused != nil {
			return executor.Observation{BuildError: refused}, false, nil
		}
	}
	if obs.Job != nil {
		if obs.Pod, err = r.findPod(ctx, exec, obs.Job); err != nil {
			return obs, false, err
		}
	}
	if terminated := executor.ToolTermination(obs.Pod); terminated != nil {
		total := int64(-1)
		if res, err := executor.ParseResult(terminated); err == nil {
			total = executor.TotalOutputBytes(res)
		}
		obs.Log = executor.ReadOutput(ctx, r.Logs, obs.Pod.Namespace, obs.Pod.Name, total, exec.Spec.MaxOutputBytes)
	}
	return obs, createdJob, nil
}

// jobWallsWidened refuses a Job not made yet whose pod another NetworkPolicy would
// open beyond its walls (wallsWidened). A Job that exists already (made by an
// earlier reconcile whose record of it was lost) runs: its call is observed, not
// refused.
func (r *ExecutionReconciler) jobWallsWidened(ctx context.Context, job *batchv1.Job, own *networkingv1.NetworkPolicy) (*refusal, error) {
	refused, err := wallsWidened(ctx, r.Client, own, "the pod of Job "+job.Name, job.Spec.Template.Labels)
	if err != nil || refused == nil {
		return refused, err
	}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{}); err == nil {
		return nil, nil
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	return refused, nil
}

// policyInTheWay refuses an existing NetworkPolicy whose spec is not the one
// BuildNetworkPolicy makes for these walls (want).
func policyInTheWay(want, existing *networkingv1.NetworkPolicy) *refusal {
	if !equality.Semantic.DeepEqual(existing.Spec, want.Spec) {
		return refuse(toolintent.EventObjectInTheWay, "NetworkPolicy %s in namespace %s is not the one toolgate makes for these network walls (its pod selector, policy types or egress differ); the call would not be fenced by it. Delete it (the next call makes it again), then recreate the call", existing.Name, existing.Namespace)
	}
	return nil
}

// fencedByNetworkKey says whether the Execution's pod is (or will be) fenced by the
// shared NetworkPolicy of its walls: always, unless its Job exists from before
// toolgate labelled pods with LabelNetwork.
func (r *ExecutionReconciler) fencedByNetworkKey(ctx context.Context, exec *toolgatev1alpha1.Execution, jobCreated bool) bool {
	if !jobCreated {
		return true
	}
	job := &batchv1.Job{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: executor.JobName(exec)}, job); err != nil {
		return true
	}
	_, labelled := job.Spec.Template.Labels[toolgatev1alpha1.LabelNetwork]
	return labelled
}

// jobInTheWay refuses a Job found by the Execution's name that is not its own.
func jobInTheWay(exec *toolgatev1alpha1.Execution, job *batchv1.Job) *refusal {
	if !metav1.IsControlledBy(job, exec) {
		return refuse(toolintent.EventObjectInTheWay, "a Job named %s already exists in namespace %s and is not this Execution's; delete it or recreate the Execution under another name", job.Name, job.Namespace)
	}
	for k, v := range executor.FindLabels(exec) {
		if job.Labels[k] != v || job.Spec.Template.Labels[k] != v {
			return refuse(toolintent.EventObjectInTheWay, "Job %s in namespace %s is this Execution's but lost its label %s=%s, by which its pod is found; its result cannot be trusted. Delete the Execution and recreate the call", job.Name, job.Namespace, k, v)
		}
	}
	return nil
}

// ensureJob returns the Execution's Job, creating it unless one was created before
// (then a missing Job was deleted, and is not created again). The Job's name is
// deterministic, so a controller that restarted between creating the Job and
// recording it gets AlreadyExists, never a second Job.
func (r *ExecutionReconciler) ensureJob(ctx context.Context, exec *toolgatev1alpha1.Execution, job *batchv1.Job, createdBefore bool) (*batchv1.Job, bool, error) {
	key := client.ObjectKeyFromObject(job)
	existing := &batchv1.Job{}
	err := r.Get(ctx, key, existing)
	if err == nil {
		return existing, false, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, err
	}
	if createdBefore {
		// The cache may lag behind a Job created moments ago: only the API server
		// can say that it is gone.
		if err := r.APIReader.Get(ctx, key, existing); err == nil {
			return existing, false, nil
		} else if !apierrors.IsNotFound(err) {
			return nil, false, err
		}
		return nil, false, nil
	}
	if r.Now().Sub(exec.CreationTimestamp.Time) >= r.Options.spentJobTTL()/2 {
		// An Execution this old may have had its Job made, recorded, finished and
		// reaped while this cache lagged (another replica's, or this one's before a
		// restart), and the free name would not stop a second run: only the API
		// server's copy says that it never had a Job. Half the TTL leaves a margin
		// for the clocks of this process and of the API server.
		current := &toolgatev1alpha1.Execution{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(exec), current); apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("%w: Execution %s/%s is gone from the API server", errStaleExecution, exec.Namespace, exec.Name)
		} else if err != nil {
			return nil, false, err
		}
		if current.UID != exec.UID || current.Status.JobName != "" || executor.IsFinished(&current.Status) {
			return nil, false, fmt.Errorf("%w: Execution %s/%s has moved on in the API server; waiting for the cache", errStaleExecution, exec.Namespace, exec.Name)
		}
	}
	if err := controllerutil.SetControllerReference(exec, job, r.Scheme); err != nil {
		return nil, false, err
	}
	if err := r.Create(ctx, job); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("creating Job %s: %w", job.Name, err)
		}
		if err := r.APIReader.Get(ctx, key, existing); err != nil {
			return nil, false, err
		}
		return existing, false, nil
	}
	failpoint.Reached(failpoint.JobCreated)
	return job, true, nil
}

// findPod returns the newest pod of job, or nil.
func (r *ExecutionReconciler) findPod(ctx context.Context, exec *toolgatev1alpha1.Execution, job *batchv1.Job) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(exec.Namespace), client.MatchingLabels{toolgatev1alpha1.LabelExecution: exec.Name}); err != nil {
		return nil, err
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !metav1.IsControlledBy(pod, job) {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&pod.CreationTimestamp) {
			newest = pod
		}
	}
	return newest, nil
}

// reapSpentJob deletes the Job (and, through the garbage collector, the pod) of a
// finished Execution that holds the whole result (executor.HoldsWholeResult),
// Options.SpentJobTTL after it finished: every call would otherwise leave a pod on
// its node and in etcd, and a Job and a pod in this controller's cache, for the Job's
// day-long TTL. The Job is this Execution's only if the Execution controls it, and is
// deleted only with its UID. The cache keeps no finished Execution's output
// (trimCachedExecution), so whether the status holds the whole result is read off the
// API server's copy, once per reaped call.
//
// A deleted Job's name is free again, and the name is what keeps a controller that
// lags from creating a Job twice; ensureJob therefore reads an old Execution from the
// API server before it makes its Job.
func (r *ExecutionReconciler) reapSpentJob(ctx context.Context, exec *toolgatev1alpha1.Execution) (ctrl.Result, error) {
	if exec.Status.JobName == "" {
		return ctrl.Result{}, nil
	}
	if wait := executor.FinishedAt(&exec.Status).Add(r.Options.spentJobTTL()).Sub(r.Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	job := &batchv1.Job{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Status.JobName}, job); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(job, exec) || !job.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	current := &toolgatev1alpha1.Execution{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(exec), current); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if current.UID != exec.UID || !executor.HoldsWholeResult(&current.Status) {
		return ctrl.Result{}, nil
	}
	err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &job.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone already, or a new object of that name that is not this Job.
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting the spent Job %s: %w", job.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("deleted the spent Job: the Execution holds its whole result", "execution", klog.KObj(exec), "job", job.Name)
	return ctrl.Result{}, nil
}
