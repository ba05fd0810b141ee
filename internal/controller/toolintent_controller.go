package controller

import (
	"context"
	"encoding/json"
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
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/judge"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/policyset"
)

// Event reasons of the intent pipeline, one per step.
const (
	EventValidated          = "Validated"
	EventValidationFailed   = "ValidationFailed"
	EventDecided            = "Decided"
	EventApprovalRequested  = "ApprovalRequested"
	EventApprovalGranted    = "ApprovalGranted"
	EventApprovalDenied     = "ApprovalDenied"
	EventApprovalExpired    = "ApprovalExpired"
	EventApprovalRefused    = "ApprovalRefused"
	EventRedecided          = "Redecided"
	EventHeldForSiblings    = "HeldForSiblings"
	EventHeldForWorkspace   = "HeldForWorkspace"
	EventExecutionRequested = "ExecutionRequested"
	EventObserved           = "Observed"
	// EventCancelled: the proposer cancelled the call (spec.cancel) before it ran;
	// an Approval it waited on is retired. A call cancelled while it ran is stopped
	// by its task (EventCallStopped) and observed Aborted.
	EventCancelled = "Cancelled"
)

// +kubebuilder:rbac:groups=toolgate.dev,resources=toolintents,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolintents/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=approvals,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=toolgate.dev,resources=executions,verbs=get;list;watch;create
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

// step is one pipeline step taken in a reconcile: an event and an audit line, emitted
// only after the status write that records it succeeded.
type step struct {
	reason, note string
	warning      bool
	related      runtime.Object
	// auditOnly steps are written to the audit log but send no Event: the steps of
	// an allowed call before it runs (validated, allowed, Execution requested) are in
	// its status and the log, and an Event each would be a write on the path to its
	// Job. Its Observed event says how it was decided.
	auditOnly bool
}

// intentRun carries one reconcile's state.
type intentRun struct {
	// observe are metric observations, made only after the status write that records
	// their step succeeded (a conflict and a retry must not count a step twice).
	observe []func()
	intent  *v1.ToolIntent
	task    *v1.AgentTask
	steps   []step
	now     time.Time
	// rechecked is set once the decision was checked against the policies in force
	// in this reconcile (recheck), or made in it.
	rechecked bool
	// began is when this reconcile started, before it read the intent: policies are
	// read by a LIST that began no earlier (policyset.Cache.LoadFresh). It is the
	// process's clock, never the reconciler's Now, which tests move.
	began time.Time
	// read is the intent as this reconcile read it.
	read *v1.ToolIntent
	// written is the status as this reconcile last wrote it (nil: not yet), so the
	// status write that ends the reconcile is made only when something changed since.
	written *v1.ToolIntentStatus
	// recorded and observed count the steps and metric observations that written
	// recorded.
	recorded, observed int
	// normalized is the intent's normalized input, once input computed it.
	normalized json.RawMessage
}

// input is the intent's normalized input (pipeline.NormalizedInput), computed once
// per reconcile: deciding, asking and fingerprinting all read it, after validation
// passed.
func (s *intentRun) input() json.RawMessage {
	if s.normalized == nil {
		s.normalized, _ = pipeline.NormalizedInput(s.intent)
	}
	return s.normalized
}

func (s *intentRun) record(reason string, warning bool, related runtime.Object, format string, args ...any) {
	s.steps = append(s.steps, step{reason: reason, warning: warning, related: related, note: mask.Secrets(fmt.Sprintf(format, args...))})
}

// audit records a step for the audit log only (see step.auditOnly).
func (s *intentRun) audit(reason string, format string, args ...any) {
	s.steps = append(s.steps, step{reason: reason, auditOnly: true, note: mask.Secrets(fmt.Sprintf(format, args...))})
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
		run.steps, run.observe = run.steps[:run.recorded], run.observe[:run.observed]
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
	run.recorded, run.observed = len(run.steps), len(run.observe)
	return false, nil
}

// reconcile is the pipeline as a checklist. Each step returns early while it waits.
func (r *ToolIntentReconciler) reconcile(ctx context.Context, run *intentRun) (ctrl.Result, error) {
	intent := run.intent
	task := &v1.AgentTask{}
	if err := r.getFresh(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: intent.Spec.TaskRef.Name}, task); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		task = nil
	}
	run.task = task
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
		if err := r.adopt(ctx, intent, task); err != nil {
			return ctrl.Result{}, err
		}
	}

	// 1. Validate.
	if intent.Status.Validation == nil {
		if err := r.validate(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
		if len(intent.Status.Validation.Errors) > 0 {
			return ctrl.Result{}, nil
		}
	}
	if task == nil {
		// The task vanished after validation (its deletion removes its intents too).
		return ctrl.Result{}, nil
	}
	done, why := pipeline.TaskClosed(task)
	if !done && intent.Status.ExecutionName == "" {
		var err error
		if done, why, err = r.stoppedTask(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
	}
	if done && intent.Status.ExecutionName == "" {
		// The task ended while this call waited (for a decision, a human or its
		// batch): it never runs.
		reason := fmt.Sprintf("AgentTask %s ended before this call ran (%s).", task.Name, why)
		setCondition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, reason)
		r.finish(run, pipeline.Refusal(v1.OutcomeAborted, reason, run.now))
		return ctrl.Result{}, nil
	}
	if intent.Spec.Cancel && intent.Status.ExecutionName == "" {
		// Its proposer withdrew it while it waited: it never runs. One that runs is
		// stopped by its task (AgentTaskReconciler.stopRunningCalls), and observed
		// from its Execution.
		return ctrl.Result{}, r.cancelled(ctx, run)
	}

	// 2. Decide.
	if intent.Status.Decision == nil {
		if err := r.decide(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
		// The decision is recorded before anything acts on it (an Approval, an
		// Execution): were its status write lost after a side effect, the next pass
		// would decide again from nothing, perhaps otherwise (the task ended, a
		// policy changed), and leave an Execution that no recorded decision allows.
		// An allowed call goes on in this pass: the status write that names its
		// Execution (execute) records the decision with it, before the Execution is
		// created. Any other decision is written now; the write returns the intent to
		// the queue.
		if intent.Status.Decision.Action != v1.DecisionAllow {
			return ctrl.Result{}, nil
		}
		// Decided from the policies as they are now, unless the judge was asked:
		// its wait comes between the policies read and the call, so it is decided
		// again just before it runs.
		run.rechecked = len(intent.Status.Decision.JudgeVerdicts) == 0
	}
	if intent.Status.ExecutionName == "" && r.notWhereDecided(run) {
		return ctrl.Result{}, nil
	}
	// 2b. A Stop or a Redirect of its turn consumes a call that has not started,
	// whatever its own decision (an Ask waiting for a human among them).
	if intent.Status.ExecutionName == "" {
		if consumed, err := r.consumeTurn(ctx, run); err != nil || consumed {
			return ctrl.Result{}, err
		}
	}

	// 3. Approve, when asked.
	if intent.Status.Decision.Action == v1.DecisionAsk && intent.Status.ExecutionName == "" {
		approved, wait, err := r.approve(ctx, run)
		if err != nil || !approved {
			return ctrl.Result{RequeueAfter: wait}, err
		}
	}

	// 4. Execute, unless a sibling of the batch waits for a human.
	if intent.Status.ExecutionName == "" {
		held, err := r.execute(ctx, run)
		if err != nil || held || intent.Status.Observation != nil {
			return ctrl.Result{}, err
		}
	}

	// 5. Observe.
	return ctrl.Result{}, r.observe(ctx, run)
}

// stoppedTask says whether another call of the run's task was decided Stop: the
// task's status says so a moment later, and no call of it starts meanwhile.
func (r *ToolIntentReconciler) stoppedTask(ctx context.Context, run *intentRun) (bool, string, error) {
	var list v1.ToolIntentList
	if err := r.List(ctx, &list, client.InNamespace(run.intent.Namespace), client.MatchingFields{IndexIntentStop: run.task.Name}); err != nil {
		return false, "", err
	}
	for i := range list.Items {
		s := &list.Items[i]
		d := s.Status.Decision
		sameBatch := len(pipeline.TurnSiblings(run.intent, []v1.ToolIntent{*s}, string(run.task.UID))) == 1
		if s.Name == run.intent.Name || sameBatch || (d.Sandbox != nil && d.Sandbox.TaskUID != string(run.task.UID)) {
			// Its own turn is consumed by the Stop itself (consumeTurn), with the
			// result that says so.
			continue
		}
		return true, fmt.Sprintf("%s: ToolIntent %s was decided Stop by rule %s", v1.ReasonPolicyStopped, s.Name, d.PolicyRuleRef), nil
	}
	return false, "", nil
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

// staleIntent says whether the API server holds a newer intent than the one read
// from the cache (or none any more).
func (r *ToolIntentReconciler) staleIntent(ctx context.Context, intent *v1.ToolIntent) (bool, error) {
	if r.APIReader == nil {
		return false, nil
	}
	fresh := &v1.ToolIntent{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(intent), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
	return fresh.ResourceVersion != intent.ResourceVersion, nil
}

// validate runs both validation layers and records the result; a failure ends the
// intent with a ValidationFailed observation.
func (r *ToolIntentReconciler) validate(ctx context.Context, run *intentRun) error {
	intent := run.intent
	in := pipeline.ValidateInput{Intent: intent, Task: run.task, ControllerIdentity: r.Options.identity()}
	if run.task != nil {
		var list v1.ToolIntentList
		if err := r.List(ctx, &list, client.InNamespace(intent.Namespace), client.MatchingFields{IndexIntentTask: run.task.Name}); err != nil {
			return err
		}
		earlier := pipeline.Earlier(intent, list.Items)
		in.EarlierIntents, in.Baselines = len(earlier), pipeline.Baselines(earlier)
	}
	v := pipeline.Validate(in)
	intent.Status.Validation = v.Status()
	if len(v.Errors) > 0 {
		reason := pipeline.ValidationReason(v.Errors)
		setCondition(intent, v1.ConditionValidated, false, v1.ReasonInputInvalid, reason)
		run.record(EventValidationFailed, true, nil, "validation failed: %s", reason)
		r.finish(run, pipeline.Refusal(v1.OutcomeValidationFailed, reason, run.now))
		return nil
	}
	msg := "input is valid"
	if v.TimeoutClamped {
		msg = fmt.Sprintf("input is valid; the timeout was clamped to the task's maximum of %ds", v.TimeoutSeconds)
	}
	setCondition(intent, v1.ConditionValidated, true, v1.ReasonInputValid, msg)
	run.audit(EventValidated, "%s", msg)
	return nil
}

// decide runs the policy engine and acts on Deny; Ask checks the task's earlier
// denials and approval budget before an Approval is requested.
func (r *ToolIntentReconciler) decide(ctx context.Context, run *intentRun) error {
	intent := run.intent
	d, err := r.decideNow(ctx, run, true)
	if err != nil {
		return err
	}
	if d.Action == v1.DecisionAsk {
		if err := r.checkAskable(ctx, run, &d); err != nil {
			return err
		}
	}
	intent.Status.Decision = &d
	decideLatency := run.now.Sub(intent.CreationTimestamp.Time).Seconds()
	run.observe = append(run.observe, func() {
		metrics.Decisions.WithLabelValues(string(d.Action), d.PolicyRuleRef.String()).Inc()
		metrics.PipelineLatency.WithLabelValues("decide").Observe(decideLatency)
	})
	setCondition(intent, v1.ConditionDecided, true, string(d.Action), fmt.Sprintf("%s by %s: %s", d.Action, d.PolicyRuleRef, d.Reason))
	if d.Action == v1.DecisionAllow {
		run.audit(EventDecided, "%s by %s: %s", d.Action, d.PolicyRuleRef.WithGeneration(), d.Reason)
	} else {
		run.record(EventDecided, d.Action != v1.DecisionAsk, nil, "%s by %s: %s", d.Action, d.PolicyRuleRef.WithGeneration(), d.Reason)
	}
	switch d.Action {
	case v1.DecisionDeny:
		setCondition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, "denied; nothing was executed")
		r.finish(run, pipeline.Refusal(v1.OutcomeDenied, fmt.Sprintf("%s (rule %s)", d.Reason, d.PolicyRuleRef), run.now))
	case v1.DecisionRedirect, v1.DecisionStop:
		turn, err := r.turnSiblings(ctx, run)
		if err != nil {
			return err
		}
		r.consume(run, intent, turn)
	}
	return nil
}

// consumeTurn ends a call that has not started when a call of its turn (itself
// included) was decided Stop or Redirect: nothing of such a turn runs. An Approval the
// call waits on is retired, so that nobody approves a call that will not run. It
// returns whether the call ended.
func (r *ToolIntentReconciler) consumeTurn(ctx context.Context, run *intentRun) (bool, error) {
	turn, err := r.turnSiblings(ctx, run)
	if err != nil {
		return false, err
	}
	by := pipeline.TurnConsumer(turn)
	if by == nil {
		return false, nil
	}
	if by.Name == run.intent.Name {
		// Its own decision in force: the one recorded here, not the cache's.
		by = run.intent
	}
	if ref := run.intent.Status.ApprovalName; ref != "" {
		approval := &v1.Approval{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.intent.Namespace, Name: ref}, approval)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, err
		case metav1.IsControlledBy(approval, run.intent) && approval.Status.State != v1.ApprovalStateConsumed:
			if err := retireApproval(ctx, r.Client, approval, v1.ApprovalStateSuperseded, "",
				fmt.Sprintf("not used: ToolIntent %s of the same turn was decided %s by %s, and nothing of the turn runs", by.Name, by.Status.Decision.Action, by.Status.Decision.PolicyRuleRef)); err != nil {
				return false, err
			}
		}
	}
	r.consume(run, by, turn)
	return true, nil
}

// cancelled ends a call its proposer cancelled (spec.cancel) before it ran. An
// Approval it waits on is retired, as for a call its turn's Stop or Redirect consumes
// (consumeTurn), so that nobody approves a call that will not run.
func (r *ToolIntentReconciler) cancelled(ctx context.Context, run *intentRun) error {
	intent := run.intent
	reason := pipeline.CancelledBeforeRunReason(intent)
	ref := intent.Status.ApprovalName
	if ref == "" && intent.Status.Decision != nil && intent.Status.Decision.Action == v1.DecisionAsk {
		// Created by a pass whose status write did not land.
		ref = pipeline.ApprovalName(intent)
	}
	if ref != "" {
		approval := &v1.Approval{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: ref}, approval)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		case metav1.IsControlledBy(approval, intent) && approval.Status.State != v1.ApprovalStateConsumed:
			if err := retireApproval(ctx, r.Client, approval, v1.ApprovalStateSuperseded, "",
				fmt.Sprintf("not used: ToolIntent %s was cancelled by %s (spec.cancel), and it does not run", intent.Name, pipeline.CancelledBy(intent))); err != nil {
				return err
			}
			intent.Status.ApprovalName = approval.Name
			setCondition(intent, v1.ConditionApproved, false, v1.ReasonCancelled, "not used: the call was cancelled by "+pipeline.CancelledBy(intent))
		}
	}
	setCondition(intent, v1.ConditionExecuted, false, v1.ReasonCancelled, reason)
	run.record(EventCancelled, true, nil, "cancelled by %s (spec.cancel) before it ran; nothing was executed", pipeline.CancelledBy(intent))
	r.finish(run, pipeline.CancelledBeforeRun(intent, run.now))
	return nil
}

// consume writes the observation of a call that by's Stop or Redirect keeps from
// running; turn is its batch, whose calls that had started the result names.
func (r *ToolIntentReconciler) consume(run *intentRun, by *v1.ToolIntent, turn []v1.ToolIntent) {
	obs, reason, msg := pipeline.Consumed(run.intent, by, pipeline.StartedCalls(turn), run.now)
	setCondition(run.intent, v1.ConditionExecuted, false, reason, msg)
	r.finish(run, obs)
}

// decideNow decides the intent against the policies in force (read from the API
// server, never the cache) and the task as it is now, and records in the decision
// the sandbox the call would run in, under its fingerprint.
//
// With judged, the DryRun rules with a match.judge condition that matched the call
// are put to the judge, and its verdicts recorded on the decision (shadow: they
// change nothing); a decision made again just before the call runs is not judged.
func (r *ToolIntentReconciler) decideNow(ctx context.Context, run *intentRun, judged bool) (v1.Decision, error) {
	intent, task := run.intent, run.task
	loaded, err := r.Policies.LoadFresh(ctx, r.APIReader, intent.Namespace, run.began)
	if err != nil {
		return v1.Decision{}, err
	}
	normalized := run.input()
	req := policy.Request{
		Namespace: intent.Namespace,
		Task:      task.Name,
		Mode:      task.Spec.Mode,
		Tool:      intent.Spec.Tool,
		Input:     normalized,
		Now:       run.now,
		Fires:     r.fireCounts(ctx, run),
	}
	if intent.Status.Decision != nil {
		// Decided again before running: a rule's cooldown is measured when the call
		// was decided, so that a cooldown that ran out while the batch waited does
		// not turn one call of a turn into a Redirect after its siblings ran.
		req.Now = pipeline.DecidedAt(intent)
	}
	d := policy.Decide(req, loaded.Cluster, loaded.Namespaced, loaded.Broken)
	if candidates := policy.JudgeCandidates(d, loaded.Cluster, loaded.Namespaced); judged && len(candidates) > 0 {
		d.JudgeVerdicts = r.Options.Judge.Evaluate(ctx, judge.CallOf(intent.Spec.Tool, normalized, &d), candidates)
		for i, v := range d.JudgeVerdicts {
			agreement := judge.Agreement(v, candidates[i].Action, d.Action)
			latency := float64(v.LatencyMillis) / 1000
			run.observe = append(run.observe, func() {
				metrics.JudgeVerdicts.WithLabelValues(string(v.Result), agreement).Inc()
				if r.Options.Judge != nil {
					metrics.JudgeLatency.Observe(latency)
				}
			})
		}
	}
	sandbox, err := pipeline.DecideSandbox(task, intent.Status.Validation, d.Walls, r.Options.DefaultSandboxImage)
	if err != nil {
		return v1.Decision{}, err
	}
	pipeline.SealDecision(&d, req, sandbox)
	return d, nil
}

// fireCounts reads, when the engine asks, how often the task's recorded decisions
// fired each rule (pipeline.RuleFires). A list that fails counts no fires, and the
// rule acts: a limit lifted by a failed read holds a call back, never lets one run.
func (r *ToolIntentReconciler) fireCounts(ctx context.Context, run *intentRun) policy.FireCounts {
	var counts policy.FireCounts
	return func(key string) policy.Fires {
		if counts == nil {
			var list v1.ToolIntentList
			if err := r.List(ctx, &list, client.InNamespace(run.intent.Namespace), client.MatchingFields{IndexIntentTask: run.task.Name}); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "listing the task's intents to count rule fires")
				return policy.Fires{}
			}
			counts = pipeline.FireCountsOf(pipeline.RuleFires(string(run.task.UID), list.Items, nil))
		}
		return counts(key)
	}
}

// notWhereDecided ends a call that has not run yet when it can no longer run where it
// was decided to: its decision records no sandbox (it was decided before decisions
// recorded one, so where it would run could only be read from the task as it is now,
// which is not what was decided or approved), or its task is not the task it was
// decided for (deleted and created again under the same name: another UID). Nothing
// runs; the model may propose the call again, which is decided for the task as it is.
func (r *ToolIntentReconciler) notWhereDecided(run *intentRun) bool {
	intent, task := run.intent, run.task
	d := intent.Status.Decision
	if d == nil || d.Action == v1.DecisionDeny || d.Action == v1.DecisionRedirect || d.Action == v1.DecisionStop || intent.Status.Observation != nil {
		return false
	}
	var reason string
	switch {
	case d.Sandbox == nil:
		reason = "this call was decided by an earlier version of toolgate, whose decisions did not record the sandbox the call runs in; it does not run in a sandbox nobody decided on. Propose the call again."
	case d.Sandbox.TaskUID != string(task.UID):
		reason = fmt.Sprintf("AgentTask %s was deleted and created again since this call was decided (uid %s then, %s now); the call was decided, and any approval given, for the earlier task, and it does not run in the new one. Propose the call again.", task.Name, d.Sandbox.TaskUID, task.UID)
	default:
		return false
	}
	setCondition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, reason)
	r.finish(run, pipeline.Refusal(v1.OutcomeAborted, reason, run.now))
	return true
}

// recheck decides the call again just before it runs (before its approval is used,
// or before an allowed call gets its Execution) and compares the result with the
// recorded decision (pipeline.Stricter): an emergency Deny added while the call
// waited for a human or for its batch, or a rule that now asks, stops it. A Deny
// ends the call Denied, nothing executed; an Ask supersedes the recorded decision
// and asks again with a new Approval (pipeline.ApprovalName), retiring approval (the
// one about to be used, nil for an allowed call) as Superseded. It returns whether
// the call must not go on now.
func (r *ToolIntentReconciler) recheck(ctx context.Context, run *intentRun, approval *v1.Approval) (bool, error) {
	intent := run.intent
	recorded := intent.Status.Decision
	now, err := r.decideNow(ctx, run, false)
	if err != nil {
		return false, err
	}
	verdict, why := pipeline.Stricter(recorded, &now)
	if verdict == pipeline.RecheckAsk {
		if err := r.checkAskable(ctx, run, &now); err != nil {
			return false, err
		}
		if now.Action == v1.DecisionDeny {
			verdict, why = pipeline.RecheckDeny, why+"; and it may not be asked: "+now.Reason
		}
	}
	if verdict == pipeline.RecheckRun {
		run.rechecked = true
		return false, nil
	}
	if verdict == pipeline.RecheckAsk && !pipeline.Supersede(intent, &now) {
		verdict, why = pipeline.RecheckDeny, fmt.Sprintf("%s; the call was decided %d times while it waited, and is not asked again", why, pipeline.MaxDecisions)
	}
	rule := now.PolicyRuleRef.String()
	// An allowed call has no Approval: its events relate to nothing, not to a nil
	// *Approval (a non-nil interface the event recorder would dereference).
	var related runtime.Object
	if approval != nil {
		related = approval
	}
	run.observe = append(run.observe, func() { metrics.Decisions.WithLabelValues(string(now.Action), now.PolicyRuleRef.String()).Inc() })
	if verdict == pipeline.RecheckDeny {
		msg := fmt.Sprintf("decided again just before running, and denied: %s", why)
		if approval != nil {
			if err := retireApproval(ctx, r.Client, approval, v1.ApprovalStateSuperseded, "", "not used: the call was "+msg); err != nil {
				return false, err
			}
		}
		if now.Action != v1.DecisionAsk && now.Action != v1.DecisionAllow {
			// The Deny (Stop, Redirect) is the decision in force; the Approval the
			// call was asked by stays named, as the record of what was approved and
			// not used.
			ref := intent.Status.ApprovalName
			if !pipeline.Supersede(intent, &now) {
				// Decided MaxDecisions times already: the decision that ends the
				// call is still the one in force (it ends it; nothing loops).
				intent.Status.Decision = &now
			}
			intent.Status.ApprovalName = ref
		}
		setCondition(intent, v1.ConditionDecided, true, v1.ReasonRedecided, msg)
		run.record(EventRedecided, true, related, "%s", msg)
		if now.Action == v1.DecisionStop || now.Action == v1.DecisionRedirect {
			// Its siblings that have not started see the new decision (consumeTurn).
			turn, err := r.turnSiblings(ctx, run)
			if err != nil {
				return false, err
			}
			r.consume(run, intent, turn)
			return true, nil
		}
		setCondition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, "denied when decided again before running; nothing was executed")
		r.finish(run, pipeline.Refusal(v1.OutcomeDenied, fmt.Sprintf("The policies changed while this call waited to run. %s (rule %s): %s", now.Reason, rule, why), run.now))
		return true, nil
	}
	msg := fmt.Sprintf("decided again just before running, and asked again: %s", why)
	if approval != nil {
		if err := retireApproval(ctx, r.Client, approval, v1.ApprovalStateSuperseded, "", "not used: the call was "+msg+"; Approval "+pipeline.ApprovalName(intent)+" asks"); err != nil {
			return false, err
		}
	}
	setCondition(intent, v1.ConditionDecided, true, v1.ReasonRedecided, msg)
	setCondition(intent, v1.ConditionApproved, false, v1.ReasonApprovalPending, msg)
	setCondition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, "asked again; nothing was executed yet")
	run.record(EventRedecided, true, related, "%s", msg)
	return true, nil
}

// checkAskable turns an Ask into a Deny when the same call was already denied by a
// human in this task, or when the task has used its approval requests.
func (r *ToolIntentReconciler) checkAskable(ctx context.Context, run *intentRun, d *v1.Decision) error {
	var approvals v1.ApprovalList
	if err := r.List(ctx, &approvals, client.InNamespace(run.intent.Namespace), client.MatchingFields{IndexApprovalTask: run.task.Name}); err != nil {
		return err
	}
	others := approvals.Items[:0]
	for _, a := range approvals.Items {
		if a.Spec.IntentRef.Name != run.intent.Name {
			others = append(others, a)
		}
	}
	pipeline.ApplyAskLimits(d, run.task.Spec.Budgets.MaxApprovalRequests, others)
	return nil
}

// approve creates the intent's Approval, or acts on its decision. It returns whether
// the intent may go on to execute, and when to look again while it waits.
func (r *ToolIntentReconciler) approve(ctx context.Context, run *intentRun) (bool, time.Duration, error) {
	intent, task := run.intent, run.task
	approval := &v1.Approval{}
	err := r.getFresh(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: pipeline.ApprovalName(intent)}, approval)
	if apierrors.IsNotFound(err) {
		normalized := run.input()
		ttl := time.Duration(task.Spec.Budgets.ApprovalTTLSeconds) * time.Second
		if ttl <= 0 {
			ttl = time.Hour
		}
		approval = pipeline.BuildApproval(intent, intent.Status.Decision, normalized, ttl, run.now)
		if err := controllerutil.SetControllerReference(intent, approval, r.Scheme); err != nil {
			return false, 0, err
		}
		// Its state (Pending, then the decision or the expiry) is the Approval
		// reconciler's to record; a change of it wakes this intent (Owns).
		if err := r.Create(ctx, approval); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, 0, err
		}
		failpoint.Reached(failpoint.ApprovalCreated)
		intent.Status.ApprovalName = approval.Name
		setCondition(intent, v1.ConditionApproved, false, v1.ReasonApprovalPending, fmt.Sprintf("waiting for a decision on Approval %s until %s", approval.Name, approval.Spec.ExpiresAt.UTC().Format(time.RFC3339)))
		run.record(EventApprovalRequested, false, approval, "Approval %s requested from %s for %s", approval.Name, approversText(approval.Spec.Approvers), intent.Status.Decision.PolicyRuleRef)
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	if !metav1.IsControlledBy(approval, intent) {
		// An Approval of this name that is not this intent's (a leftover of an
		// earlier intent of the same name) is never judged for it.
		r.inTheWay(run, "Approval", approval.Name, fmt.Sprintf("Approval %s is not controlled by this ToolIntent (UID %s)", approval.Name, intent.UID))
		return false, 0, nil
	}
	intent.Status.ApprovalName = approval.Name

	fp, err := r.currentFingerprint(ctx, run)
	if err != nil {
		return false, 0, err
	}
	execName := pipeline.ExecutionName(intent)
	switch pipeline.JudgeApproval(approval, fp, execName) {
	case pipeline.VerdictWait:
		return false, 0, nil

	case pipeline.VerdictDenied:
		reason := pipeline.DeniedReason(approval)
		setCondition(intent, v1.ConditionApproved, false, v1.ReasonApprovalDenied, reason)
		setCondition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, "approval denied; nothing was executed")
		run.record(EventApprovalDenied, true, approval, "%s", reason)
		r.finish(run, pipeline.Refusal(v1.OutcomeApprovalDenied, reason, run.now))
		return false, 0, nil

	case pipeline.VerdictExpired:
		reason := fmt.Sprintf("Approval %s expired at %s without a decision.", approval.Name, approval.Spec.ExpiresAt.UTC().Format(time.RFC3339))
		if approval.Status.DecidedAt != nil {
			reason = fmt.Sprintf("Approval %s expired at %s: it was %s.", approval.Name, approval.Spec.ExpiresAt.UTC().Format(time.RFC3339), approval.Status.Message)
		}
		setCondition(intent, v1.ConditionApproved, false, v1.ReasonApprovalExpired, reason)
		setCondition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, "approval expired; nothing was executed")
		run.record(EventApprovalExpired, true, approval, "%s", reason)
		r.finish(run, pipeline.Refusal(v1.OutcomeApprovalExpired, reason, run.now))
		return false, 0, nil

	case pipeline.VerdictSuperseded:
		// Retired by a decision made again in an earlier pass whose status write did
		// not land: decide again; it is never used, even if the policies changed back.
		if stop, err := r.recheck(ctx, run, approval); err != nil || stop {
			return false, time.Second, err
		}
		reason := fmt.Sprintf("Approval %s was retired (%s) and is not used; nothing was executed. Propose the call again.", approval.Name, approval.Status.Message)
		setCondition(intent, v1.ConditionApproved, false, v1.ReasonFingerprintMismatch, reason)
		setCondition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, "approval retired; nothing was executed")
		run.record(EventApprovalRefused, true, approval, "%s", reason)
		r.finish(run, pipeline.Refusal(v1.OutcomeApprovalDenied, reason, run.now))
		return false, 0, nil

	case pipeline.VerdictMismatch, pipeline.VerdictConsumedElsewhere:
		reason := fmt.Sprintf("Approval %s does not match this call any more (its fingerprint %s, the call's now %s: the deciding policy changed since it was asked); the approval is refused and nothing was executed", approval.Name, short(approval.Spec.Fingerprint), short(fp))
		if approval.Status.State == v1.ApprovalStateConsumed {
			reason = fmt.Sprintf("Approval %s was already used by Execution %s; an approval is used once", approval.Name, approval.Status.ConsumedByExecutionName)
		} else if err := retireApproval(ctx, r.Client, approval, approval.Status.State, "", "approved, but refused by the controller: "+reason); err != nil {
			return false, 0, err
		}
		setCondition(intent, v1.ConditionApproved, false, v1.ReasonFingerprintMismatch, reason)
		setCondition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, "approval refused; nothing was executed")
		run.record(EventApprovalRefused, true, approval, "%s", reason)
		r.finish(run, pipeline.Refusal(v1.OutcomeApprovalDenied, reason, run.now))
		return false, 0, nil
	}

	// Approved, for this very call. Batch preflight before the approval is used.
	if held, err := r.holdForSiblings(ctx, run); err != nil || held {
		return false, 0, err
	}
	if approval.Status.State != v1.ApprovalStateConsumed {
		// The last moment before the approval is used: the policies in force may
		// have changed while it waited (an emergency Deny, a rule that asks).
		if stop, err := r.recheck(ctx, run, approval); err != nil || stop {
			return false, time.Second, err
		}
		if err := consumeApproval(ctx, r.Client, approval, execName); err != nil {
			if apierrors.IsConflict(err) {
				return false, time.Second, nil
			}
			return false, 0, err
		}
		failpoint.Reached(failpoint.ApprovalConsumed)
	}
	setCondition(intent, v1.ConditionApproved, true, v1.ReasonApprovalGranted, fmt.Sprintf("approved by %s", approval.Spec.DecidedBy))
	run.record(EventApprovalGranted, false, approval, "approved by %s; Approval %s consumed by Execution %s", approval.Spec.DecidedBy, approval.Name, execName)
	return true, 0, nil
}

// currentFingerprint recomputes the decision's fingerprint with the deciding policy's
// current generation, so an approval given under an older rule is refused. The walls
// and the sandbox are the decision's own records: the Execution is built from them,
// so the approval binds exactly the sandbox the call runs in.
func (r *ToolIntentReconciler) currentFingerprint(ctx context.Context, run *intentRun) (string, error) {
	d := run.intent.Status.Decision
	ref := d.PolicyRuleRef
	if !ref.IsModeDefault() {
		g, found, err := r.policyGeneration(ctx, run.intent.Namespace, ref)
		if err != nil {
			return "", err
		}
		if !found {
			return "", nil // the policy is gone: no fingerprint matches
		}
		ref.Generation = g
	}
	normalized := run.input()
	return policy.FingerprintWithSandbox(run.intent.Namespace, run.task.Name, run.intent.Spec.Tool, normalized, ref, d.Walls, d.Sandbox), nil
}

// policyGeneration is the current generation of the policy ref names; found is
// false when it does not exist.
func (r *ToolIntentReconciler) policyGeneration(ctx context.Context, namespace string, ref v1.PolicyRuleReference) (int64, bool, error) {
	var obj client.Object
	key := client.ObjectKey{Name: ref.Name}
	switch ref.Kind {
	case v1.PolicyRuleKindClusterToolPolicy:
		obj = &v1.ClusterToolPolicy{}
	case v1.PolicyRuleKindToolPolicy:
		obj = &v1.ToolPolicy{}
		key.Namespace = namespace
	default:
		return 0, false, nil
	}
	if err := r.APIReader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, false, nil
		}
		return 0, false, err
	}
	return obj.GetGeneration(), true, nil
}

// holdForSiblings implements batch preflight: while a call of the same turn waits for
// a human, this one does not execute.
func (r *ToolIntentReconciler) holdForSiblings(ctx context.Context, run *intentRun) (bool, error) {
	turn, err := r.turnSiblings(ctx, run)
	if err != nil {
		return false, err
	}
	if pipeline.TurnConsumer(turn) != nil {
		// Decided Stop or Redirect since this reconcile's first look.
		return r.consumeTurn(ctx, run)
	}
	blocking := pipeline.BlockingSiblings(run.intent, turn)
	missing := pipeline.MissingSiblings(run.intent, turn)
	if len(blocking) == 0 && len(missing) == 0 {
		return false, nil
	}
	msg := fmt.Sprintf("held: sibling intents of turn %d wait for a decision: %v", run.intent.Spec.Turn, blocking)
	if len(missing) > 0 {
		msg = fmt.Sprintf("held: turn %d has %d calls (spec.turnCalls) and calls %v of it do not exist yet; waiting for a decision on %v", run.intent.Spec.Turn, run.intent.Spec.TurnCalls, missing, blocking)
	}
	if c := meta.FindStatusCondition(run.intent.Status.Conditions, v1.ConditionExecuted); c == nil || c.Reason != v1.ReasonWaitingForSiblings || c.Message != msg {
		run.record(EventHeldForSiblings, false, nil, "%s", msg)
	}
	setCondition(run.intent, v1.ConditionExecuted, false, v1.ReasonWaitingForSiblings, msg)
	return true, nil
}

// holdForWorkspace holds a call of a task whose workspace is not cloned (or
// copied) yet: it would run on an empty or half-written worktree. The call waits
// (the task's Ready condition says why); the task's watch wakes it once the clone
// or copy is recorded.
func (r *ToolIntentReconciler) holdForWorkspace(run *intentRun) bool {
	task := run.task
	if pipeline.WorkspaceCloned(task) {
		return false
	}
	seeded, why := "cloned its workspace (spec.workspace.git)", "the clone has not finished"
	if task.Spec.Workspace.CopyOf != nil {
		seeded, why = "copied its workspace (spec.workspace.copyOf)", "the copy has not finished"
	}
	if c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue && c.Message != "" {
		why = c.Reason + ": " + c.Message
	}
	msg := fmt.Sprintf("held: AgentTask %s has not %s yet (%s); the call runs once it has", task.Name, seeded, why)
	if c := meta.FindStatusCondition(run.intent.Status.Conditions, v1.ConditionExecuted); c == nil || c.Reason != v1.ReasonWaitingForWorkspace || c.Message != msg {
		run.record(EventHeldForWorkspace, false, nil, "%s", msg)
	}
	setCondition(run.intent, v1.ConditionExecuted, false, v1.ReasonWaitingForWorkspace, msg)
	return true
}

// execute creates the intent's one Execution, from the decision's records alone (the
// task as it is now plays no part). It returns true when the call does not go on
// now: held for its batch, or decided again.
func (r *ToolIntentReconciler) execute(ctx context.Context, run *intentRun) (bool, error) {
	intent := run.intent
	if a := intent.Status.Decision.Action; a != v1.DecisionAllow && a != v1.DecisionAsk {
		// Redirect and Stop end the call when decided; nothing else ever runs.
		return true, fmt.Errorf("ToolIntent %s is decided %s and has no observation: it does not run", intent.Name, a)
	}
	if r.holdForWorkspace(run) {
		return true, nil
	}
	if intent.Status.Decision.Action == v1.DecisionAllow {
		if held, err := r.holdForSiblings(ctx, run); err != nil || held {
			return held, err
		}
		// The last moment before an allowed call runs; an asked one was checked
		// before its approval was used.
		if !run.rechecked {
			if stop, err := r.recheck(ctx, run, nil); err != nil || stop {
				return true, err
			}
		}
	}
	exec, err := pipeline.BuildExecution(intent)
	if err != nil {
		return false, err
	}
	// Record first, then create. The intent this reconcile read (from the cache) may
	// be older than the API server's: this controller's own last write not seen yet,
	// or another replica's, which decided the call again (Ask, Deny) after this one
	// rechecked it. Naming the Execution in the intent's status is a compare-and-swap
	// on that version, so only a reconcile holding the latest intent gets past it;
	// the others conflict and create nothing. A crash between the two writes leaves
	// the intent naming an Execution that does not exist yet (ExecutionRequested),
	// which the next pass creates (observe).
	// For a call allowed in this reconcile, the same write records the decision.
	intent.Status.ExecutionName = exec.Name
	setCondition(intent, v1.ConditionExecuted, false, v1.ReasonExecutionRequested, fmt.Sprintf("Execution %s is requested; it runs once it has its Job", exec.Name))
	if conflict, err := r.writeStatus(ctx, run); err != nil || conflict {
		return true, err
	}
	failpoint.Reached(failpoint.ExecutionNamed)
	return false, r.createExecution(ctx, run, exec)
}

// createExecution creates the Execution the intent names, from its decision's
// records alone, and records that it runs.
func (r *ToolIntentReconciler) createExecution(ctx context.Context, run *intentRun, exec *v1.Execution) error {
	intent := run.intent
	if err := controllerutil.SetControllerReference(intent, exec, r.Scheme); err != nil {
		return err
	}
	if err := r.Create(ctx, exec); err == nil {
		failpoint.Reached(failpoint.ExecutionCreated)
	} else {
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// One of this name exists: it counts only when it is this intent's own
		// (an earlier pass that created it and did not get to record it), never a
		// leftover or a planted one.
		existing := &v1.Execution{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(exec), existing); err != nil {
			return err
		}
		if problem := pipeline.ExecutionMismatch(existing, exec); problem != "" {
			intent.Status.ExecutionName = ""
			r.inTheWay(run, "Execution", existing.Name, problem)
			return nil
		}
	}
	if intent.Status.Decision.Action == v1.DecisionAllow {
		dispatchLatency := run.now.Sub(pipeline.DecidedAt(intent)).Seconds()
		run.observe = append(run.observe, func() { metrics.PipelineLatency.WithLabelValues("dispatch").Observe(dispatchLatency) })
	}
	// Executed stays ExecutionRequested until the Execution reports its Job (observe):
	// another status write now would be one more on the path to the Job.
	run.audit(EventExecutionRequested, "Execution %s created (timeout %ds, image %s)", exec.Name, exec.Spec.TimeoutSeconds, exec.Spec.Sandbox.Image)
	return nil
}

// inTheWay ends the intent without running anything because an object of the name
// it needs is not its own.
func (r *ToolIntentReconciler) inTheWay(run *intentRun, kind, name, problem string) {
	reason := fmt.Sprintf("%s; nothing was executed. Delete %s %s and propose the call again.", problem, kind, name)
	setCondition(run.intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, reason)
	run.record(EventObjectInTheWay, true, nil, "%s", reason)
	r.finish(run, pipeline.Refusal(v1.OutcomeFailed, reason, run.now))
}

// observe writes the observation once the Execution finished.
func (r *ToolIntentReconciler) observe(ctx context.Context, run *intentRun) error {
	intent := run.intent
	exec := &v1.Execution{}
	if err := r.getFresh(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: intent.Status.ExecutionName}, exec); err != nil {
		if apierrors.IsNotFound(err) {
			if c := meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionExecuted); c != nil && c.Reason == v1.ReasonExecutionRequested {
				// Named, and not created yet: the pass that named it ended first. Unless
				// the cache is behind this controller's own last write (which recorded
				// the Execution running, before someone deleted it): creating it again
				// would run a call someone stopped. The intent is read from the API
				// server first; when it moved on, the watch brings the newer one.
				if stale, err := r.staleIntent(ctx, intent); err != nil || stale {
					return err
				}
				exec, err := pipeline.BuildExecution(intent)
				if err != nil {
					return err
				}
				return r.createExecution(ctx, run, exec)
			}
			// Someone deleted the Execution: whether it ran is unknown.
			obs := pipeline.Refusal(v1.OutcomeAborted, fmt.Sprintf("Execution %s was deleted before it reported a result; the call may or may not have had effects.", intent.Status.ExecutionName), run.now)
			obs.Executed = true
			setCondition(intent, v1.ConditionExecuted, true, v1.ReasonExecutionFinished, "the Execution was deleted")
			r.finish(run, obs)
			return nil
		}
		return err
	}
	if !executor.IsFinished(&exec.Status) {
		if c := meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionExecuted); c != nil && c.Reason == v1.ReasonExecutionRequested && (exec.Status.JobName != "" || exec.Status.SessionName != "") {
			// Recorded from here on, a missing Execution was deleted, never one to
			// create (the call may have run).
			where := "as Job " + exec.Status.JobName
			if exec.Status.JobName == "" {
				where = "in session pod " + exec.Status.SessionName
			}
			setCondition(intent, v1.ConditionExecuted, false, v1.ReasonExecutionCreated, fmt.Sprintf("Execution %s runs %s", exec.Name, where))
		}
		if exec.Status.Background != nil {
			// A background job that started: the call's result is that it did.
			obs := pipeline.FromBackgroundStart(exec, run.now)
			setCondition(intent, v1.ConditionExecuted, true, v1.ReasonBackgroundStarted, fmt.Sprintf("Execution %s runs on as a background job in session pod %s", exec.Name, exec.Status.SessionName))
			r.finish(run, obs)
		}
		return nil
	}
	// The cache keeps no finished Execution's output (trimCachedExecution): the
	// observation is made from the API server's copy, once it is that Execution,
	// finished; otherwise the watch brings the change (a delete, the cache catching up).
	if r.APIReader != nil {
		current := &v1.Execution{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(exec), current); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if current.UID != exec.UID || !executor.IsFinished(&current.Status) {
			return nil
		}
		exec = current
	}
	obs := pipeline.CancelledWhileRunning(intent, pipeline.FromExecution(exec, run.now))
	setCondition(intent, v1.ConditionExecuted, true, v1.ReasonExecutionFinished, fmt.Sprintf("Execution %s finished: %s", exec.Name, obs.Outcome))
	duration := float64(exec.Status.DurationMillis) / 1000
	run.observe = append(run.observe, func() {
		metrics.ExecutionDuration.WithLabelValues(string(intent.Spec.Tool), string(obs.Outcome)).Observe(duration)
	})
	r.finish(run, obs)
	return nil
}

// finish writes the observation: the terminal step of every intent.
func (r *ToolIntentReconciler) finish(run *intentRun, obs *v1.Observation) {
	intent := run.intent
	intent.Status.Observation = obs
	msg := fmt.Sprintf("outcome %s; executed: %t", obs.Outcome, obs.Executed)
	setCondition(intent, v1.ConditionObserved, true, v1.ReasonObservationWritten, msg)
	if d := intent.Status.Decision; d != nil {
		// The one event of an allowed call says how it was decided (see step.auditOnly).
		msg = fmt.Sprintf("%s; decided %s by %s", msg, d.Action, d.PolicyRuleRef)
	}
	run.observe = append(run.observe, func() {
		metrics.IntentsObserved.WithLabelValues(string(intent.Spec.Tool), string(obs.Outcome)).Inc()
	})
	run.record(EventObserved, obs.Outcome != v1.OutcomeSucceeded, nil, "%s", msg)
}

// emit sends each step's event and audit line, after the status write succeeded.
func (r *ToolIntentReconciler) emit(log logr.Logger, run *intentRun) {
	for _, observe := range run.observe {
		observe()
	}
	intent := run.intent
	for _, s := range run.steps {
		kind := corev1.EventTypeNormal
		if s.warning {
			kind = corev1.EventTypeWarning
		}
		if !s.auditOnly {
			r.Recorder.Eventf(intent, s.related, kind, s.reason, s.reason, "%s", s.note)
		}
		var extra []any
		if a, ok := s.related.(*v1.Approval); ok && a.Spec.DecidedBy != "" {
			extra = append(extra, "decidedBy", a.Spec.DecidedBy)
		}
		auditLine(log, s.reason, s.note, intent, extra...)
	}
}

func setCondition(intent *v1.ToolIntent, typ string, status bool, reason, message string) {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: truncate(mask.Secrets(message), 32000), ObservedGeneration: intent.Generation}
	if status {
		c.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&intent.Status.Conditions, c)
}

func approversText(a *v1.Approvers) string {
	if a == nil || (len(a.Users) == 0 && len(a.Groups) == 0) {
		return "anyone holding the approve verb"
	}
	return fmt.Sprintf("users %v groups %v", a.Users, a.Groups)
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
