package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/approval"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policyset"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// +kubebuilder:rbac:groups=toolgate.dev,resources=toolintents,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolintents/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=approvals,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=toolgate.dev,resources=executions,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=toolgate.dev,resources=approvalgrants,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=approvalgrants/status,verbs=get;update
// +kubebuilder:rbac:groups=toolgate.dev,resources=agenttasks,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolpolicies;clustertoolpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ToolIntentReconciler moves a ToolIntent through validate -> decide -> approve ->
// execute -> observe. Each step's result is recorded in the intent's status once and
// never redone: a decision is a fact of the moment it was made (replay re-runs policy
// to show what would change).
type ToolIntentReconciler struct {
	client.Client
	// APIReader reads around the cache where a stale read would decide wrongly:
	// policies (a decision uses the policies as they are now) and the NotFound of
	// objects just created.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Options   Options
	Recorder  events.EventRecorder
	Policies  *policyset.Cache
	// Now is the clock; tests may replace it.
	Now func() time.Time
}

func setupToolIntent(mgr ctrl.Manager, opts Options) error {
	r := &ToolIntentReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Options:   opts,
		Recorder:  mgr.GetEventRecorder("toolgate-intent"),
		Policies:  opts.policySet(),
		Now:       opts.clock(),
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.ToolIntent{}).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: opts.Workers.orDefault().Intent}).
		Owns(&v1.Approval{}).
		Owns(&v1.Execution{}).
		// Batch preflight: a sibling's change may release an intent held for it.
		Watches(&v1.ToolIntent{}, handler.EnqueueRequestsFromMapFunc(r.siblingsOf), builder.WithPredicates(siblingHoldChanged)).
		// A task that ends (cancel, budget) aborts its calls that have not run.
		Watches(&v1.AgentTask{}, handler.EnqueueRequestsFromMapFunc(r.openIntentsOf), builder.WithPredicates(taskEndingChanged)).
		Named("toolintent").
		Complete(r)
}

// siblingsOf maps an intent to the other unobserved intents of its task and turn.
func (r *ToolIntentReconciler) siblingsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	intent, ok := obj.(*v1.ToolIntent)
	if !ok {
		return nil
	}
	list, err := r.turnOf(ctx, intent)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the intents of a turn", "toolintent", klog.KObj(intent))
		return nil
	}
	var out []reconcile.Request
	for _, s := range list {
		if s.Name != intent.Name && s.Status.Observation == nil {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
	}
	return out
}

// turnSiblings lists the intents of the run's batch (pipeline.TurnSiblings), itself
// included.
func (r *ToolIntentReconciler) turnSiblings(ctx context.Context, run *intentRun) ([]v1.ToolIntent, error) {
	list, err := r.turnOf(ctx, run.intent)
	if err != nil {
		return nil, err
	}
	return pipeline.TurnSiblings(run.intent, list, string(run.task.UID)), nil
}

// turnOf lists the intents of intent's task and turn, itself included.
func (r *ToolIntentReconciler) turnOf(ctx context.Context, intent *v1.ToolIntent) ([]v1.ToolIntent, error) {
	var list v1.ToolIntentList
	if err := r.List(ctx, &list, client.InNamespace(intent.Namespace), client.MatchingFields{IndexIntentTurn: IntentTurnKey(intent.Spec.TaskRef.Name, intent.Spec.Turn)}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// openIntentsOf maps a task to its intents without an observation.
func (r *ToolIntentReconciler) openIntentsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1.ToolIntentList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{IndexIntentTask: obj.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the open intents of a task", "agentTask", klog.KObj(obj))
		return nil
	}
	var out []reconcile.Request
	for _, s := range list.Items {
		if s.Status.Observation == nil {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
	}
	return out
}

// reachedRecorded marks the step boundaries a status write just recorded (for the
// kill-point tests; see internal/failpoint).
func reachedRecorded(before, after *v1.ToolIntent) {
	if before.Status.Validation == nil && after.Status.Validation != nil {
		failpoint.Reached(failpoint.Validated)
	}
	if before.Status.Decision == nil && after.Status.Decision != nil {
		failpoint.Reached(failpoint.Decided)
	}
	if before.Status.Observation == nil && after.Status.Observation != nil {
		failpoint.Reached(failpoint.Observed)
	}
}

// intentRun carries one reconcile's state.
type intentRun struct {
	// observe are metric observations, made only after the status write that records
	// their step succeeded (a conflict and a retry must not count a step twice).
	observe []func()
	intent  *v1.ToolIntent
	task    *v1.AgentTask
	// events are the steps' events and audit lines, emitted only after the status
	// write that records them succeeded.
	events []toolintent.Event
	now    time.Time
	// began is when this reconcile started, before it read the intent: policies are
	// read by a LIST that began no earlier (policyset.Cache.LoadFresh). It is the
	// process's clock, never the reconciler's Now, which tests move.
	began time.Time
	// read is the intent as this reconcile read it.
	read *v1.ToolIntent
	// written is the status as this reconcile last wrote it (nil: not yet), so the
	// status write that ends the reconcile is made only when something changed since.
	written *v1.ToolIntentStatus
	// recorded and observed count the events and metric observations that written
	// recorded.
	recorded, observed int
}

// Reconcile moves one ToolIntent forward.
func (r *ToolIntentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	began := time.Now()
	intent := &v1.ToolIntent{}
	if err := r.Get(ctx, req.NamespacedName, intent); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !intent.DeletionTimestamp.IsZero() || meta.IsStatusConditionTrue(intent.Status.Conditions, v1.ConditionObserved) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("toolintent", klog.KObj(intent), "task", intent.Spec.TaskRef.Name)
	ctx = ctrl.LoggerInto(ctx, log)

	run := &intentRun{intent: intent.DeepCopy(), read: intent, now: r.Now(), began: began}
	result, err := r.reconcile(ctx, run)
	// failed: the last status this reconcile meant to write is not recorded (the
	// reconcile or the write failed, or the write conflicted).
	failed := err != nil
	if !failed {
		last := &intent.Status
		if run.written != nil {
			last = run.written
		}
		if !equality.Semantic.DeepEqual(*last, run.intent.Status) {
			var conflict bool
			conflict, err = r.writeStatus(ctx, run)
			if failed = err != nil || conflict; conflict {
				result = ctrl.Result{RequeueAfter: time.Second}
			}
		}
	}
	if failed {
		// Only what a write recorded is audited: a decision written with the
		// Execution's name stays audited whatever failed after it.
		run.events, run.observe = run.events[:run.recorded], run.observe[:run.observed]
	}
	r.emit(log, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	return result, nil
}

// writeStatus writes the run's intent status, a compare-and-swap on the version this
// reconcile holds. It reports a conflict (another write came first: nothing of this
// reconcile is recorded, and it is retried from the intent as it is then).
func (r *ToolIntentReconciler) writeStatus(ctx context.Context, run *intentRun) (bool, error) {
	run.intent.Status.ObservedGeneration = run.intent.Generation
	if err := r.Status().Update(ctx, run.intent); err != nil {
		if apierrors.IsConflict(err) {
			return true, nil
		}
		return false, err
	}
	before := run.read
	if run.written != nil {
		before = &v1.ToolIntent{Status: *run.written}
	}
	reachedRecorded(before, run.intent)
	run.written = run.intent.Status.DeepCopy()
	run.recorded, run.observed = len(run.events), len(run.observe)
	return false, nil
}

// maxSteps bounds the steps of one reconcile: Next moves on at every step, and a
// reconcile that does not end within this many has a bug, reported as an error
// rather than a loop.
const maxSteps = 64

// reconcile reads the task, then takes the steps toolintent.Next gives, reading
// what each Read step asks for, until one ends the reconcile.
func (r *ToolIntentReconciler) reconcile(ctx context.Context, run *intentRun) (ctrl.Result, error) {
	w := &toolintent.World{Intent: run.intent, Now: run.now, ControllerIdentity: r.Options.identity()}
	if err := r.readTask(ctx, run, w); err != nil {
		return ctrl.Result{}, err
	}
	for range maxSteps {
		s := toolintent.Next(w)
		switch s.Do {
		case toolintent.Read:
			if err := r.read(ctx, run, w, s); err != nil {
				return ctrl.Result{}, err
			}
			continue
		case toolintent.Fail:
			return ctrl.Result{}, s.Err
		case toolintent.UseApproval:
			// Used once: a compare-and-swap on the version read, so a second use (a
			// racing reconcile, a second manager) conflicts and does not run the call.
			if err := r.retire(ctx, s.Retire); err != nil {
				if apierrors.IsConflict(err) {
					return ctrl.Result{RequeueAfter: time.Second}, nil
				}
				return ctrl.Result{}, err
			}
			failpoint.Reached(failpoint.ApprovalConsumed)
			r.apply(run, s.Change)
			w.ApprovalUsed = true
			continue
		case toolintent.UseGrant:
			// One use, a compare-and-swap on the version read: of two calls racing
			// for the last use one conflicts, reads the grant again and judges it
			// again. A grant deleted meanwhile is revoked: its update is NotFound.
			if err := r.Status().Update(ctx, s.Grant.Grant); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					return ctrl.Result{RequeueAfter: time.Second}, nil
				}
				return ctrl.Result{}, err
			}
			r.apply(run, s.Change)
			continue
		}
		if err := r.retire(ctx, s.Retire); err != nil {
			return ctrl.Result{}, err
		}
		switch s.Do {
		case toolintent.Update:
			r.apply(run, s.Change)
		case toolintent.End:
			r.apply(run, s.Change)
			return ctrl.Result{RequeueAfter: s.RequeueAfter}, nil
		case toolintent.RequestApproval:
			if err := r.createApproval(ctx, run, s.Approval); err != nil {
				return ctrl.Result{}, err
			}
			r.apply(run, s.Change)
			return ctrl.Result{}, nil
		case toolintent.NameExecution:
			r.apply(run, s.Change)
			if conflict, err := r.writeStatus(ctx, run); err != nil || conflict {
				return ctrl.Result{}, err
			}
			failpoint.Reached(failpoint.ExecutionNamed)
			w.ExecutionNamed = true
		case toolintent.CreateExecution:
			if err := r.createExecution(ctx, run, w, s.Execution); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	return ctrl.Result{}, fmt.Errorf("ToolIntent %s took more than %d steps in one reconcile", run.intent.Name, maxSteps)
}

// readTask reads the intent's task, and adopts an external agent's intent.
func (r *ToolIntentReconciler) readTask(ctx context.Context, run *intentRun, w *toolintent.World) error {
	intent := run.intent
	task := &v1.AgentTask{}
	if err := r.getFresh(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: intent.Spec.TaskRef.Name}, task); err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		task = nil
	}
	run.task = task
	w.Task.Set(task)
	if task != nil && task.Spec.Agent.External != nil && task.DeletionTimestamp.IsZero() && metav1.GetControllerOf(intent) == nil {
		// An external agent's intent names its task but is not owned by it: adopt it,
		// so deleting the task removes its intents and tools like Argo CD show them
		// as the task's children. Only metadata changes; the spec stays immutable.
		// A model task's intents are created owned by it by the agent loop; one that
		// is not was created by someone else, and adopting it would make it look like
		// the task's own (validation refuses it). A task being deleted adopts
		// nothing: with orphan propagation the garbage collector has just taken its
		// owner reference off the intent, and adopting it again would hand it back to
		// be deleted with the task.
		return r.adopt(ctx, intent, task)
	}
	return nil
}

// retire writes an Approval's retirement, when a step has one.
func (r *ToolIntentReconciler) retire(ctx context.Context, t *toolintent.Retirement) error {
	if t == nil {
		return nil
	}
	return approval.Retire(ctx, r.Client, t.Approval, t.State, t.ConsumedBy, t.Message)
}

// createApproval creates the intent's Approval, owned by it: a change of its state
// wakes the intent (Owns).
func (r *ToolIntentReconciler) createApproval(ctx context.Context, run *intentRun, a *v1.Approval) error {
	if err := controllerutil.SetControllerReference(run.intent, a, r.Scheme); err != nil {
		return err
	}
	if err := r.Create(ctx, a); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	failpoint.Reached(failpoint.ApprovalCreated)
	return nil
}

// createExecution creates the Execution the intent names; one of that name that
// exists already is read into w, for Next to judge.
func (r *ToolIntentReconciler) createExecution(ctx context.Context, run *intentRun, w *toolintent.World, exec *v1.Execution) error {
	if err := controllerutil.SetControllerReference(run.intent, exec, r.Scheme); err != nil {
		return err
	}
	err := r.Create(ctx, exec)
	if err == nil {
		failpoint.Reached(failpoint.ExecutionCreated)
		w.ExecutionCreated = true
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	existing := &v1.Execution{}
	if err := kube.Latest(r.Client, r.APIReader).Get(ctx, client.ObjectKeyFromObject(exec), existing); err != nil {
		return err
	}
	w.ExistingExecution.Set(existing)
	return nil
}

// apply records a step's change in the intent's status, with its events and metric
// observations (made only once a status write recorded them).
func (r *ToolIntentReconciler) apply(run *intentRun, c toolintent.Change) {
	intent := run.intent
	toolintent.Apply(intent, c, run.now)
	run.events = append(run.events, c.Events...)
	if d := c.Counted; d != nil {
		action, rule := string(d.Action), d.PolicyRuleRef.String()
		run.observe = append(run.observe, func() { metrics.Decisions.WithLabelValues(action, rule).Inc() })
	}
	if c.FirstDecision {
		latency := run.now.Sub(intent.CreationTimestamp.Time).Seconds()
		run.observe = append(run.observe, func() { metrics.PipelineLatency.WithLabelValues("decide").Observe(latency) })
	}
	if c.Dispatched {
		latency := run.now.Sub(pipeline.DecidedAt(intent)).Seconds()
		run.observe = append(run.observe, func() { metrics.PipelineLatency.WithLabelValues("dispatch").Observe(latency) })
	}
	if exec := c.Ran; exec != nil {
		tool, outcome, duration := string(intent.Spec.Tool), string(c.Observation.Outcome), float64(exec.Status.DurationMillis)/1000
		run.observe = append(run.observe, func() { metrics.ExecutionDuration.WithLabelValues(tool, outcome).Observe(duration) })
	}
	if obs := c.Observation; obs != nil {
		tool, outcome := string(intent.Spec.Tool), string(obs.Outcome)
		run.observe = append(run.observe, func() { metrics.IntentsObserved.WithLabelValues(tool, outcome).Inc() })
	}
}

// adopt makes the task the intent's controller owner. The task is read again from
// the API server first: the cache may not have seen its deletion start yet (a
// moment's lag would hand an orphaned intent back to the collector), and it reads
// once per external intent.
func (r *ToolIntentReconciler) adopt(ctx context.Context, intent *v1.ToolIntent, task *v1.AgentTask) error {
	if r.APIReader != nil {
		fresh := &v1.AgentTask{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(task), fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		if fresh.UID != task.UID || !fresh.DeletionTimestamp.IsZero() {
			return nil
		}
	}
	patch := client.MergeFromWithOptions(intent.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if err := controllerutil.SetControllerReference(task, intent, r.Scheme); err != nil {
		return err
	}
	return r.Patch(ctx, intent, patch)
}

func (r *ToolIntentReconciler) getFresh(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	return kube.GetFresh(ctx, r.Client, r.APIReader, key, obj)
}

// emit sends each step's event and audit line, after the status write succeeded.
func (r *ToolIntentReconciler) emit(log logr.Logger, run *intentRun) {
	for _, observe := range run.observe {
		observe()
	}
	intent := run.intent
	for _, e := range run.events {
		kind := corev1.EventTypeNormal
		if e.Warning {
			kind = corev1.EventTypeWarning
		}
		// An event about no Approval relates to nothing, not to a nil *Approval (a
		// non-nil interface the event recorder would dereference).
		var related runtime.Object
		var extra []any
		if e.Related != nil {
			related = e.Related
			if t := pipeline.CountVotes(e.Related); t.DeniedBy != "" {
				extra = append(extra, "deniedBy", t.DeniedBy)
			} else if len(t.ApprovedBy) > 0 {
				extra = append(extra, "approvedBy", t.Voters())
			}
		}
		if !e.AuditOnly {
			r.Recorder.Eventf(intent, related, kind, e.Reason, e.Reason, "%s", e.Note)
		}
		auditLine(log, e.Reason, e.Note, intent, extra...)
	}
}
