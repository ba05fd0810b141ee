package controller

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tools"
)

// Event reasons of the Execution controller, one per step.
const (
	// EventExecutionCreated: the controller picked up a new Execution. This and the
	// other Normal steps are written to the audit log only (see recordSteps).
	EventExecutionCreated = "ExecutionCreated"
	// EventJobCreated: the Execution's Job was created (behind its task's NetworkPolicy).
	EventJobCreated = "JobCreated"
	// EventStarted: the tool started running.
	EventStarted = "Started"
	// EventFinished: the Execution finished (Normal when it succeeded, Warning otherwise).
	EventFinished = "Finished"
	// EventChainBroken: the Execution is not the one its ToolIntent decided to run
	// (pipeline.CheckChain); it never gets a Job.
	EventChainBroken = "ChainBroken"
)

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
	// ChainGrace bounds how long a new Execution waits for its ToolIntent to record
	// it (default one minute).
	ChainGrace time.Duration
	// sessions delivers the calls of tasks with isolation Session.
	sessions *sessionCalls
}

// refusal is why an Execution is not run (or its Job not read), with the reason of
// the Warning event that says so, and of its Complete condition when that is not
// ReasonJobInvalid.
type refusal struct {
	reason    string
	condition string
	err       error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// ConditionReason makes a refusal an executor.ReasonedError.
func (r *refusal) ConditionReason() string { return r.condition }

func refuse(reason, format string, args ...any) *refusal {
	return &refusal{reason: reason, err: fmt.Errorf(format, args...)}
}

// +kubebuilder:rbac:groups=toolgate.dev,resources=executions,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=executions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolintents;approvals,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
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
	var sessionExec executor.SessionExecutor = executor.PodExec{Config: mgr.GetConfig(), Clientset: clientset}
	if opts.SessionExecutor != nil {
		sessionExec = opts.SessionExecutor
	}
	return &ExecutionReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Options:   opts,
		Logs:      executor.PodLogReader{Clientset: clientset},
		Recorder:  mgr.GetEventRecorder("toolgate-execution"),
		Now:       time.Now,
		sessions:  newSessionCalls(sessionExec, mgr.GetAPIReader(), mgr.GetClient(), time.Now),
	}, nil
}

func setupExecution(mgr ctrl.Manager, opts Options) error {
	r, err := newExecutionReconciler(mgr, opts)
	if err != nil {
		return err
	}
	return r.SetupWithManager(mgr)
}

// SetupWithManager watches Executions, the Jobs they own, the NetworkPolicies of
// their namespaces (toolgate's fences, and any other policy, which may open the
// walls: a new, changed or deleted one wakes the calls that have not ended), the
// Jobs' pods (mapped to their Execution by label: a pod's owner is the Job, not the
// Execution), and ToolIntents (mapped to their Execution by name, so that one waiting
// for its intent to record it is checked again as soon as the intent's status moves).
func (r *ExecutionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&toolgatev1alpha1.Execution{}).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: r.Options.Workers.orDefault().Execution}).
		Owns(&batchv1.Job{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToExecution)).
		Watches(&toolgatev1alpha1.ToolIntent{}, handler.EnqueueRequestsFromMapFunc(intentToExecution), builder.WithPredicates(intentChainChanged)).
		Watches(&networkingv1.NetworkPolicy{}, handler.EnqueueRequestsFromMapFunc(r.executionsBehind), builder.WithPredicates(networkPolicyChanged)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.executionsOfSession)).
		WatchesRawSource(source.Channel(r.sessions.wake, &handler.EnqueueRequestForObject{})).
		Named("execution").
		Complete(r)
}

// podToExecution maps a pod to the Execution named by its execution label.
func podToExecution(_ context.Context, obj client.Object) []reconcile.Request {
	name, ok := obj.GetLabels()[toolgatev1alpha1.LabelExecution]
	if !ok || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
}

// intentToExecution maps a ToolIntent to its Execution: the one its status names, or
// the one it is about to name (the name is deterministic).
func intentToExecution(_ context.Context, obj client.Object) []reconcile.Request {
	intent, ok := obj.(*toolgatev1alpha1.ToolIntent)
	if !ok {
		return nil
	}
	name := pipeline.ExecutionName(intent)
	reqs := []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: intent.Namespace, Name: name}}}
	if ref := intent.Status.ExecutionName; ref != "" && ref != name {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: intent.Namespace, Name: ref}})
	}
	return reqs
}

// Reconcile moves one Execution forward along its path: a job tool is answered
// from the task's background jobs, a git push runs in a push pod, a call of a
// session (isolation Session) is delivered to its session pod, and any other call
// runs as a Job.
func (r *ExecutionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	exec := &toolgatev1alpha1.Execution{}
	if err := r.Get(ctx, req.NamespacedName, exec); apierrors.IsNotFound(err) {
		r.sessions.gone(req.NamespacedName)
		return ctrl.Result{}, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if !exec.DeletionTimestamp.IsZero() {
		r.sessions.gone(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	// A finished Execution is final: its Job is deleted once spent (reapSpentJob)
	// or by its TTL, and that is not an abort.
	if executor.IsFinished(&exec.Status) {
		return r.reapSpentJob(ctx, exec)
	}
	log := ctrl.LoggerFrom(ctx).WithValues(
		"execution", klog.KObj(exec),
		"task", exec.Spec.TaskRef.Name,
		"intent", exec.Spec.IntentRef.Name,
		"job", executor.JobName(exec),
		"fingerprint", exec.Spec.Fingerprint,
		"approval", exec.Spec.ApprovalName(),
	)
	ctx = ctrl.LoggerInto(ctx, log)
	if t, ok := tools.Lookup(exec.Spec.Tool); ok && t.JobTool {
		return r.reconcileJobTool(ctx, exec)
	}
	if exec.Spec.Tool == toolgatev1alpha1.ToolGitPush {
		return r.reconcileGitPush(ctx, exec)
	}
	if executor.IsSession(exec.Spec.Sandbox) && exec.Status.JobName == "" {
		return r.reconcileSession(ctx, exec)
	}
	return r.reconcileJob(ctx, exec)
}

// executionsBehind maps a NetworkPolicy to the unfinished Executions of its
// namespace: toolgate's fence of some of them deleted or changed is made again or
// refused at once, and any policy may open the walls of any of them
// (wallsWidened), which then does not start, or stops in its session.
func (r *ExecutionReconciler) executionsBehind(ctx context.Context, obj client.Object) []reconcile.Request {
	var execs toolgatev1alpha1.ExecutionList
	if err := r.List(ctx, &execs, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the Executions a NetworkPolicy may fence", "networkPolicy", klog.KObj(obj))
		return nil
	}
	var out []reconcile.Request
	for i := range execs.Items {
		exec := &execs.Items[i]
		if !executor.IsFinished(&exec.Status) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(exec)})
		}
	}
	return out
}

// executionsOfSession maps a session pod to the unfinished Executions of its task
// that wait for it or run in it, so that a session that became ready, or died, is
// seen at once.
func (r *ExecutionReconciler) executionsOfSession(ctx context.Context, obj client.Object) []reconcile.Request {
	if _, ok := obj.GetLabels()[toolgatev1alpha1.LabelSession]; !ok {
		return nil
	}
	owner := metav1.GetControllerOf(obj)
	if owner == nil || owner.Kind != "AgentTask" {
		return nil
	}
	var execs toolgatev1alpha1.ExecutionList
	if err := r.List(ctx, &execs, client.InNamespace(obj.GetNamespace()), client.MatchingFields{IndexExecutionTask: owner.Name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the Executions of a session pod's task", "pod", klog.KObj(obj))
		return nil
	}
	var out []reconcile.Request
	for i := range execs.Items {
		exec := &execs.Items[i]
		if !executor.IsFinished(&exec.Status) && executor.IsSession(exec.Spec.Sandbox) && executor.ExecutionSession(exec) == obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(exec)})
		}
	}
	return out
}
