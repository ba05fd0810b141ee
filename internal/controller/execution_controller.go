package controller

import (
	"context"
	"errors"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/protocol"
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
	// EventObjectInTheWay: an object with the name of the Execution's Job, or of its
	// task's NetworkPolicy, exists and is not theirs; the Execution fails closed.
	EventObjectInTheWay = "ObjectInTheWay"
)

// defaultChainGrace is how long a new Execution waits for its ToolIntent to record
// it before it is refused (see authorize).
const defaultChainGrace = time.Minute

// errStaleExecution: the cached Execution is behind the API server's; the reconcile
// is retried once the cache caught up.
var errStaleExecution = errors.New("stale Execution")

// chainRecheck is how often a waiting Execution looks at its intent again; the
// ToolIntent watch usually wakes it sooner.
const chainRecheck = 2 * time.Second

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

// Reconcile moves one Execution forward: make sure of its NetworkPolicy, create its
// Job, then read
// the Job, its pod and the runner's result into the status, written once.
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

// authorize checks, before the Execution gets a Job, that it is the one invocation
// its ToolIntent decided to run (pipeline.CheckChain). It returns how long to wait
// before checking again, or the refusal, or neither when the chain is whole.
//
// The ToolIntent controller records the Execution in the intent's status (with the
// decision, for a call allowed in the same reconcile) before it creates it, so the
// intent normally names the Execution by the time it is seen. The cache may show an
// older intent, or an admin's Execution may come first: a chain that does not hold
// in the cache is checked again against the API server, and one still pending
// (pipeline.ErrChainPending) is waited out: no Job is made while it lasts, and the
// intent is read again when its status moves (the ExecutionName, decision or
// approval: intentChainChanged) and every chainRecheck, up to ChainGrace from the
// Execution's creation; after that the Execution is refused (the call fails closed,
// as an Exception the model sees). An approval is consumed before the Execution is
// created, and a decision never changes once recorded, so neither is waited for.
func (r *ExecutionReconciler) authorize(ctx context.Context, exec *toolgatev1alpha1.Execution) (time.Duration, *refusal, error) {
	broken, err := r.checkChain(ctx, r.Client, exec)
	if err != nil {
		return 0, nil, err
	}
	if broken != nil && r.APIReader != nil {
		if broken, err = r.checkChain(ctx, r.APIReader, exec); err != nil {
			return 0, nil, err
		}
	}
	if broken == nil {
		// The chain is whole; the call still does not start once its task ended
		// (cancelled, failed, succeeded): the task would only delete the Job again.
		if done, why, err := r.taskEnded(ctx, exec, pipeline.TaskClosed); err != nil || done {
			if err != nil {
				return 0, nil, err
			}
			return 0, refuse(EventChainBroken, "not run: AgentTask %s ended before this call started (%s); a call of an ended task never runs", exec.Spec.TaskRef.Name, why), nil
		}
		// Nor once its proposer cancelled it (pipeline.CallStopped).
		if cancelled, why, err := r.intentCancelled(ctx, exec); err != nil || cancelled {
			if err != nil {
				return 0, nil, err
			}
			return 0, refuse(EventChainBroken, "not run: %s before this call started; a cancelled call never runs", why), nil
		}
		return 0, nil, nil
	}
	if errors.Is(broken, pipeline.ErrChainPending) {
		grace := r.ChainGrace
		if grace <= 0 {
			grace = defaultChainGrace
		}
		waited := r.Now().Sub(exec.CreationTimestamp.Time)
		if waited < grace {
			ctrl.LoggerFrom(ctx).V(1).Info("waiting for the intent to record the Execution", "why", broken.Error())
			return min(chainRecheck, grace-waited), nil, nil
		}
		return 0, refuse(EventChainBroken, "%s %s after the Execution was created; an Execution runs only once its intent names it", broken, grace), nil
	}
	ctrl.LoggerFrom(ctx).Info("refusing the Execution: its authorization chain is broken", "why", broken.Error())
	return 0, refuse(EventChainBroken, "%s", broken), nil
}

// taskEnded reads the Execution's task from the API server (a task cancelled a
// moment ago must count: the cache may not show it yet) and says whether it ended by
// the rule: pipeline.TaskClosed for a call that has not started (a task being
// deleted starts none), pipeline.TaskFinished for one that runs (it runs on through
// an orphaning deletion). A task that does not exist ends nothing here: the chain
// check already holds the Execution to its intent. A task that ends after this check
// stops its calls itself (AgentTaskReconciler.stopRunningCalls deletes their Jobs).
func (r *ExecutionReconciler) taskEnded(ctx context.Context, exec *toolgatev1alpha1.Execution, rule func(*toolgatev1alpha1.AgentTask) (bool, string)) (bool, string, error) {
	reader := kube.Latest(r.Client, r.APIReader)
	task := &toolgatev1alpha1.AgentTask{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.TaskRef.Name}, task); err != nil {
		return false, "", client.IgnoreNotFound(err)
	}
	done, why := rule(task)
	return done, why, nil
}

// intentCancelled reads the Execution's intent from the API server (a cancel of a
// moment ago must count) and says whether its proposer cancelled it, and why.
func (r *ExecutionReconciler) intentCancelled(ctx context.Context, exec *toolgatev1alpha1.Execution) (bool, string, error) {
	reader := kube.Latest(r.Client, r.APIReader)
	intent := &toolgatev1alpha1.ToolIntent{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.IntentRef.Name}, intent); err != nil {
		return false, "", client.IgnoreNotFound(err)
	}
	why := pipeline.CallStopped("", intent)
	return why != "", why, nil
}

// checkChain reads the intent and approval the Execution names with reader and
// checks the chain between them.
func (r *ExecutionReconciler) checkChain(ctx context.Context, reader client.Reader, exec *toolgatev1alpha1.Execution) (error, error) {
	intent := &toolgatev1alpha1.ToolIntent{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.IntentRef.Name}, intent); apierrors.IsNotFound(err) {
		intent = nil
	} else if err != nil {
		return nil, err
	}
	var approval *toolgatev1alpha1.Approval
	if exec.Spec.ApprovalName() != "" {
		approval = &toolgatev1alpha1.Approval{}
		if err := reader.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.ApprovalName()}, approval); apierrors.IsNotFound(err) {
			approval = nil
		} else if err != nil {
			return nil, err
		}
	}
	return pipeline.CheckChain(exec, intent, approval), nil
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
		return refuse(EventObjectInTheWay, "NetworkPolicy %s in namespace %s is not the one toolgate makes for these network walls (its pod selector, policy types or egress differ); the call would not be fenced by it. Delete it (the next call makes it again), then recreate the call", existing.Name, existing.Namespace)
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

// jobInTheWay refuses a Job found by the Execution's name that is not its own.
func jobInTheWay(exec *toolgatev1alpha1.Execution, job *batchv1.Job) *refusal {
	if !metav1.IsControlledBy(job, exec) {
		return refuse(EventObjectInTheWay, "a Job named %s already exists in namespace %s and is not this Execution's; delete it or recreate the Execution under another name", job.Name, job.Namespace)
	}
	for k, v := range executor.FindLabels(exec) {
		if job.Labels[k] != v || job.Spec.Template.Labels[k] != v {
			return refuse(EventObjectInTheWay, "Job %s in namespace %s is this Execution's but lost its label %s=%s, by which its pod is found; its result cannot be trusted. Delete the Execution and recreate the call", job.Name, job.Namespace, k, v)
		}
	}
	return nil
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

// sessionCallCancelled says why a session call must stop because its proposer
// cancelled it (pipeline.CallStopped), or "". Read from the cache, as the task is.
func (r *ExecutionReconciler) sessionCallCancelled(ctx context.Context, exec *toolgatev1alpha1.Execution) (string, error) {
	intent := &toolgatev1alpha1.ToolIntent{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.IntentRef.Name}, intent); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	return pipeline.CallStopped("", intent), nil
}

// sessionWallsWidened says why a call in flight must stop because a NetworkPolicy
// now opens its session pod's walls (wallsWidened; a change to any NetworkPolicy
// wakes the call), or "". A call delivered but waiting for its turn then never
// starts; one that runs is stopped (the session then takes no further call:
// readySession checks the walls before each one).
func (r *ExecutionReconciler) sessionWallsWidened(ctx context.Context, exec *toolgatev1alpha1.Execution) (string, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Status.SessionName}, pod); err != nil {
		return "", client.IgnoreNotFound(err) // a pod gone ends its call anyway
	}
	policy, err := executor.BuildNetworkPolicy(exec)
	if err != nil {
		return "", nil // it was built before the call was delivered
	}
	refused, err := wallsWidened(ctx, r.Client, policy, "session pod "+pod.Name, pod.Labels)
	if err != nil || refused == nil {
		return "", err
	}
	return refused.Error(), nil
}

// reconcileSession moves a call of a session (isolation Session) forward: the chain
// is checked as for a Job; then the call waits for its session pod to take calls
// (starting it when there is none, replacing it when it died); then the session and
// the start are recorded, and only once that write succeeded is the call delivered
// (sessionCalls.deliver), so that a controller that restarts or lags never delivers
// a call twice: it finds the record, and a call recorded but not in this process's
// memory is lost, never run again. Its run, when it ends, wakes this reconcile
// and is projected into the status like a Job's terminated pod.
func (r *ExecutionReconciler) reconcileSession(ctx context.Context, exec *toolgatev1alpha1.Execution) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("session", executor.ExecutionSession(exec))
	var (
		obs     executor.Observation
		refused *refusal
		deliver string
		podUID  types.UID
		requeue time.Duration
	)
	switch {
	case exec.Status.SessionName != "":
		run, inFlight := r.sessions.run(exec.UID)
		obs.Session = &executor.SessionObservation{Name: exec.Status.SessionName, Started: exec.Status.StartTime, Run: run, Background: exec.Status.Background}
		if run == nil && inFlight {
			// Its end wakes this reconcile. A call whose task ended is stopped here
			// (the task's end deletes its sessions, which wakes it).
			// (Read from the cache: a call stopped a moment late loses nothing.)
			task := &toolgatev1alpha1.AgentTask{}
			if err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.TaskRef.Name}, task); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			} else if done, why := pipeline.TaskFinished(task); err == nil && done {
				r.sessions.stop(exec.UID, fmt.Sprintf("its AgentTask %s ended (%s)", exec.Spec.TaskRef.Name, why))
				return ctrl.Result{}, nil
			} else if why, err := r.sessionCallCancelled(ctx, exec); err != nil {
				return ctrl.Result{}, err
			} else if why != "" {
				// Its proposer cancelled it (spec.cancel; the intent's watch wakes
				// this reconcile): the call alone stops, the session goes on.
				r.sessions.stop(exec.UID, why)
				return ctrl.Result{}, nil
			} else if err == nil && r.sessions.job(exec.UID) != nil && task.Spec.Sandbox.Isolation != toolgatev1alpha1.IsolationSession {
				// The job tools are gone with the sessions: nobody could see or stop it.
				r.sessions.stop(exec.UID, fmt.Sprintf("its AgentTask %s was set to isolation %s, which has no background jobs", exec.Spec.TaskRef.Name, task.Spec.Sandbox.Isolation))
				return ctrl.Result{}, nil
			}
			if why, err := r.sessionWallsWidened(ctx, exec); err != nil {
				return ctrl.Result{}, err
			} else if why != "" {
				r.sessions.stop(exec.UID, why)
				return ctrl.Result{}, nil
			}
			// A background job is recorded started once its runner said so: its
			// intent is observed then.
			if exec.Status.Background != nil || r.sessions.job(exec.UID).startedAt().IsZero() {
				return ctrl.Result{}, nil
			}
			obs.Session.Background = &toolgatev1alpha1.BackgroundStatus{StartedAt: metav1.NewTime(r.sessions.job(exec.UID).startedAt())}
			break
		}
		if run != nil && obs.Session.Background == nil && !run.JobStartedAt.IsZero() {
			obs.Session.Background = &toolgatev1alpha1.BackgroundStatus{StartedAt: metav1.NewTime(run.JobStartedAt)}
		}
		obs.Session.Stopped = r.sessions.stoppedBy(exec.UID)
		if run != nil && obs.Session.Stopped == "" && (run.Err != nil || len(run.Result) == 0 || (run.ExitCode != protocol.ExitSucceeded && run.ExitCode != protocol.ExitFailed)) {
			// A run cut short may have been stopped by its task's end, which stops
			// the task's sessions and the calls in them.
			done, why, err := r.taskEnded(ctx, exec, pipeline.TaskFinished)
			if err != nil {
				return ctrl.Result{}, err
			}
			if done {
				obs.Session.Stopped = fmt.Sprintf("its AgentTask %s ended (%s)", exec.Spec.TaskRef.Name, why)
			}
		}
		if run == nil {
			obs.Session.Lost = fmt.Sprintf("the call was delivered to session pod %s by a controller that is gone (it restarted, or lost its lead), and its result with it; the call's stream closed, which stops it in the session, and it is not run again; whether it changed anything is unknown, and the session is replaced before the next call", exec.Status.SessionName)
		}
	case r.sessions.known(exec.UID):
		return ctrl.Result{}, nil // delivered a moment ago; the cache has not caught up
	default:
		wait, why, err := r.authorize(ctx, exec)
		if err != nil {
			return ctrl.Result{}, err
		}
		if wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if refused = why; refused == nil {
			var waiting string
			if waiting, podUID, refused, err = r.readySession(ctx, exec); err != nil {
				return ctrl.Result{}, err
			}
			name := executor.ExecutionSession(exec)
			switch {
			case refused != nil:
			case waiting != "":
				obs.Session = &executor.SessionObservation{Name: name, Waiting: waiting}
				requeue = sessionRecheck
			default:
				obs.Session = &executor.SessionObservation{Name: name, Started: ptr.To(metav1.NewTime(r.Now()))}
				deliver = name
			}
		}
		if refused != nil {
			obs = executor.Observation{BuildError: refused}
		}
	}
	before, conflicted, err := r.writeStatus(ctx, log, exec, obs)
	if err != nil || conflicted {
		return conflictRequeue(conflicted), err
	}
	if before == nil {
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	if deliver != "" {
		r.sessions.deliver(ctx, exec, deliver, podUID)
	}
	if executor.IsFinished(&exec.Status) {
		r.sessions.forget(exec.UID)
		failpoint.Reached(failpoint.ResultRead)
		if s := obs.Session; s != nil {
			// A session takes no call after one that did not end clean, nor after
			// one delivered by a controller that is gone (what it did is unknown);
			// a background job's session was its own.
			why, pod := s.Lost, types.UID("")
			if s.Run != nil {
				why, pod = retireAfter(s.Run, tools.IsBackground(exec.Spec.Tool, exec.Spec.Input.Raw)), s.Run.PodUID
			}
			if why != "" {
				if err := r.retireSession(ctx, exec.Namespace, exec.Status.SessionName, pod, why); err != nil {
					return ctrl.Result{}, err
				}
			}
		}
	}
	r.recordSteps(log, exec, before, nil, false, refused)
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// retireSession deletes the session pod a call ran in (of that UID, when known: a
// new pod of the name is not the one), for why. The next call starts a new session.
func (r *ExecutionReconciler) retireSession(ctx context.Context, namespace, name string, uid types.UID, why string) error {
	pod := &corev1.Pod{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !pod.DeletionTimestamp.IsZero() || (uid != "" && pod.UID != uid) {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("replacing the session", "pod", name, "why", why)
	return kube.DeleteByUID(ctx, r.Client, pod)
}

// readySession returns "" and the pod's UID when the Execution's session pod takes
// calls, else why
// the call waits: the session is started when it does not exist, and replaced when
// it died. A pod under the session's name that is not the task's session is a
// refusal. The NetworkPolicy of the call's walls is made first, as for a Job, and
// a session whose walls another NetworkPolicy opens takes no call
// (wallsWidened).
func (r *ExecutionReconciler) readySession(ctx context.Context, exec *toolgatev1alpha1.Execution) (string, types.UID, *refusal, error) {
	task := &toolgatev1alpha1.AgentTask{}
	if err := kube.GetFresh(ctx, r.Client, r.APIReader, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.TaskRef.Name}, task); apierrors.IsNotFound(err) {
		return "", "", refuse(EventChainBroken, "AgentTask %s is gone: its session cannot be started", exec.Spec.TaskRef.Name), nil
	} else if err != nil {
		return "", "", nil, err
	}
	// Sessions are named after the task's name: a call decided for an earlier task
	// of the name must not run in the sessions of the one that replaced it.
	if decided, err := r.decidedTaskUID(ctx, r.Client, exec); err != nil {
		return "", "", nil, err
	} else if decided != task.UID {
		// The cache may lag behind either object: only the API server's copies
		// refuse the call.
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(task), task); apierrors.IsNotFound(err) {
			return "", "", refuse(EventChainBroken, "AgentTask %s is gone: its session cannot be started", exec.Spec.TaskRef.Name), nil
		} else if err != nil {
			return "", "", nil, err
		}
		if decided, err = r.decidedTaskUID(ctx, r.APIReader, exec); err != nil {
			return "", "", nil, err
		}
		if decided != task.UID {
			return "", "", refuse(EventChainBroken, "AgentTask %s (uid %s) is not the task this call was decided for (uid %q): it was deleted and created again since, and the call does not run in the new task's sessions", task.Name, task.UID, decided), nil
		}
	}
	name := executor.ExecutionSession(exec)
	pod := &corev1.Pod{}
	err := r.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: name}, pod)
	if apierrors.IsNotFound(err) {
		refused, err := startSession(ctx, r.Client, r.APIReader, r.Scheme, task, executor.ExecutionSessionOf(exec), r.Options.RunnerImage)
		if err != nil || refused != nil {
			return "", "", refused, err
		}
		return fmt.Sprintf("session pod %s is starting", name), "", nil, nil
	} else if err != nil {
		return "", "", nil, err
	}
	if refused, err := sessionInTheWay(pod, task, executor.ExecutionSessionOf(exec)); errors.Is(err, errEarlierTask) {
		return fmt.Sprintf("session pod %s: %v", name, err), "", nil, nil
	} else if err != nil || refused != nil {
		return "", "", refused, err
	}
	if ended, why := executor.SessionEnded(pod); ended && pod.DeletionTimestamp.IsZero() {
		if err := kube.DeleteByUID(ctx, r.Client, pod); err != nil {
			return "", "", nil, err
		}
		return why + "; a new session is started for this call", "", nil, nil
	}
	if ready, why := executor.SessionReady(pod); !ready {
		return why, "", nil, nil
	}
	// The policy made before the pod may have been deleted since: the call still
	// runs only behind it. Another policy made since the pod started may open its
	// walls: checked before every call.
	policy, err := executor.BuildNetworkPolicy(exec)
	if err != nil {
		return "", "", refuse(EventChainBroken, "%s", err), nil
	}
	if refused, err := ensureNetworkPolicy(ctx, r.Client, r.APIReader, policy); err != nil || refused != nil {
		return "", "", refused, err
	}
	refused, err := wallsWidened(ctx, r.Client, policy, "session pod "+pod.Name, pod.Labels)
	if err != nil || refused != nil {
		return "", "", refused, err
	}
	return "", pod.UID, nil, nil
}

// decidedTaskUID is the UID of the task the Execution's intent was decided for, as
// its decision recorded it; "" when reader shows no such decision.
func (r *ExecutionReconciler) decidedTaskUID(ctx context.Context, reader client.Reader, exec *toolgatev1alpha1.Execution) (types.UID, error) {
	intent := &toolgatev1alpha1.ToolIntent{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Spec.IntentRef.Name}, intent); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if d := intent.Status.Decision; d != nil && d.Sandbox != nil {
		return types.UID(d.Sandbox.TaskUID), nil
	}
	return "", nil
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
