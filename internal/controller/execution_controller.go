package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
)

// Event reasons of the Execution controller, one per step.
const (
	// EventExecutionCreated: the controller picked up a new Execution.
	EventExecutionCreated = "ExecutionCreated"
	// EventJobCreated: the Execution's NetworkPolicy and Job were created.
	EventJobCreated = "JobCreated"
	// EventStarted: the tool started running.
	EventStarted = "Started"
	// EventFinished: the Execution finished (Normal when it succeeded, Warning otherwise).
	EventFinished = "Finished"
)

// maxEventNote is the API server's limit on an event's note.
const maxEventNote = 1024

// ExecutionReconciler runs each Execution as a sandboxed Job and projects the Job,
// its pod and the runner's result into the Execution's status.
type ExecutionReconciler struct {
	client.Client
	// APIReader reads uncached: a Job this controller just created may not be in
	// the cache yet, and must not be taken for deleted.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Options   Options
	// Logs reads the tool container's log (default: the pods/log subresource).
	Logs     executor.LogReader
	Recorder events.EventRecorder
	// Now is the clock for condition transition times.
	Now func() time.Time
}

// +kubebuilder:rbac:groups=toolgate.dev,resources=executions,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=executions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// newExecutionReconciler returns a reconciler that reads logs through the pods/log
// subresource with a clientset made from the manager's config.
func newExecutionReconciler(mgr ctrl.Manager, opts Options) (*ExecutionReconciler, error) {
	clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating the clientset that reads pod logs: %w", err)
	}
	return &ExecutionReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Options:   opts,
		Logs:      executor.PodLogReader{Clientset: clientset},
		Recorder:  mgr.GetEventRecorder("toolgate-execution"),
		Now:       time.Now,
	}, nil
}

func setupExecution(mgr ctrl.Manager, opts Options) error {
	r, err := newExecutionReconciler(mgr, opts)
	if err != nil {
		return err
	}
	return r.SetupWithManager(mgr)
}

// SetupWithManager watches Executions, the Jobs and NetworkPolicies they own, and the
// Jobs' pods (mapped to their Execution by label: a pod's owner is the Job, not the
// Execution).
func (r *ExecutionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&toolgatev1alpha1.Execution{}).
		Owns(&batchv1.Job{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToExecution)).
		Named("execution").
		Complete(r)
}

// podToExecution maps a pod to the Execution named by its execution label.
func podToExecution(_ context.Context, obj client.Object) []reconcile.Request {
	name, ok := obj.GetLabels()[executor.LabelExecution]
	if !ok || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
}

// Reconcile moves one Execution forward: create its NetworkPolicy and Job, then read
// the Job, its pod and the runner's result into the status, written once.
func (r *ExecutionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	exec := &toolgatev1alpha1.Execution{}
	if err := r.Get(ctx, req.NamespacedName, exec); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// A finished Execution is final: its Job is deleted later by its TTL, and that
	// is not an abort.
	if !exec.DeletionTimestamp.IsZero() || executor.IsFinished(&exec.Status) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues(
		"execution", klog.KObj(exec),
		"task", exec.Spec.TaskRef.Name,
		"intent", exec.Spec.IntentRef.Name,
		"job", executor.JobName(exec),
		"fingerprint", exec.Spec.Fingerprint,
		"approval", exec.Spec.ApprovalRef,
	)
	ctx = ctrl.LoggerInto(ctx, log)

	obs, createdJob, err := r.observe(ctx, exec)
	if err != nil {
		return ctrl.Result{}, err
	}
	status := executor.Project(exec, obs, r.Now())
	if equality.Semantic.DeepEqual(status, exec.Status) {
		return ctrl.Result{}, nil
	}
	before := exec.Status.DeepCopy()
	exec.Status = status
	if err := r.Status().Update(ctx, exec); err != nil {
		if apierrors.IsConflict(err) {
			// Someone else wrote first; the watch brings the new version back.
			log.V(2).Info("status write conflicted; requeueing")
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	r.recordSteps(log, exec, before, obs.Job, createdJob)
	return ctrl.Result{}, nil
}

// observe makes sure the NetworkPolicy and the Job exist and reads what the status is
// projected from. createdJob is true when this call created the Job.
func (r *ExecutionReconciler) observe(ctx context.Context, exec *toolgatev1alpha1.Execution) (obs executor.Observation, createdJob bool, err error) {
	job, err := executor.BuildJob(exec, r.Options.RunnerImage)
	if err != nil {
		return executor.Observation{BuildError: err}, false, nil
	}
	policy, err := executor.BuildNetworkPolicy(exec)
	if err != nil {
		return executor.Observation{BuildError: err}, false, nil
	}
	obs.JobCreated = exec.Status.JobName != ""

	// The NetworkPolicy comes first, so that the pod never runs without it.
	if err := r.ensureNetworkPolicy(ctx, exec, policy); err != nil {
		return obs, false, err
	}
	obs.Job, createdJob, err = r.ensureJob(ctx, exec, job, obs.JobCreated)
	if err != nil {
		return obs, false, err
	}
	if obs.Job != nil && !metav1.IsControlledBy(obs.Job, exec) {
		return executor.Observation{BuildError: fmt.Errorf("a Job named %s already exists in namespace %s and is not this Execution's; delete it or recreate the Execution under another name", obs.Job.Name, obs.Job.Namespace)}, false, nil
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

func (r *ExecutionReconciler) ensureNetworkPolicy(ctx context.Context, exec *toolgatev1alpha1.Execution, policy *networkingv1.NetworkPolicy) error {
	err := r.Get(ctx, client.ObjectKeyFromObject(policy), &networkingv1.NetworkPolicy{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	if err := controllerutil.SetControllerReference(exec, policy, r.Scheme); err != nil {
		return err
	}
	if err := r.Create(ctx, policy); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating NetworkPolicy %s: %w", policy.Name, err)
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
	return job, true, nil
}

// findPod returns the newest pod of job, or nil.
func (r *ExecutionReconciler) findPod(ctx context.Context, exec *toolgatev1alpha1.Execution, job *batchv1.Job) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(exec.Namespace), client.MatchingLabels{executor.LabelExecution: exec.Name}); err != nil {
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

// recordSteps emits an event and one audit log line for each step the status write
// just recorded.
func (r *ExecutionReconciler) recordSteps(log logr.Logger, exec *toolgatev1alpha1.Execution, before *toolgatev1alpha1.ExecutionStatus, job *batchv1.Job, createdJob bool) {
	var related runtime.Object
	if job != nil {
		related = job
	}
	after := &exec.Status
	step := func(eventType, reason, note string, kv ...any) {
		if len(note) > maxEventNote {
			// events.k8s.io refuses longer notes; the status has the whole message.
			note = strings.ToValidUTF8(note[:maxEventNote-3], "") + "..."
		}
		r.Recorder.Eventf(exec, related, eventType, reason, reason, "%s", note)
		log.Info("execution step", append([]any{"step", reason, "phase", after.Phase}, kv...)...)
	}
	if before.Phase == "" {
		step(corev1.EventTypeNormal, EventExecutionCreated, fmt.Sprintf("running tool %s", exec.Spec.Tool), "tool", exec.Spec.Tool)
	}
	if createdJob {
		step(corev1.EventTypeNormal, EventJobCreated, fmt.Sprintf("created Job %s", job.Name))
	}
	if after.Phase == toolgatev1alpha1.ExecutionRunning && before.Phase != toolgatev1alpha1.ExecutionRunning {
		step(corev1.EventTypeNormal, EventStarted, fmt.Sprintf("pod %s started the tool", after.PodName), "pod", after.PodName)
	}
	if executor.IsFinished(after) {
		eventType, note := corev1.EventTypeNormal, fmt.Sprintf("%s exited 0 in %s", exec.Spec.Tool, after.Duration)
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
