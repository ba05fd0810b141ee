package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
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
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policyset"
)

// stopRecheck is how often an ended task looks again at its calls that have not
// finished (stopRunningCalls).
const stopRecheck = 2 * time.Second

// Event reasons of AgentTasks.
const (
	EventWorkspaceCreated = "WorkspaceCreated"
	EventTaskSucceeded    = "TaskSucceeded"
	EventTaskFailed       = "TaskFailed"
	EventAwaitingApproval = "AwaitingApproval"
	// EventCallStopped: the task ended while a call of it ran, so its Job was
	// deleted; the Execution ends Aborted.
	EventCallStopped = "CallStopped"
	// EventTaskKept (Warning): the task's TTL passed and it stays, because the
	// archive did not store its record.
	EventTaskKept = "TaskKept"
	// EventModelTurn: the model took a turn (its reply is recorded and its tool calls
	// are ToolIntents), or the intents of a recorded turn were created after a restart.
	EventModelTurn = "ModelTurn"
	// EventCompletionChecked: a final answer was checked against the Completion rules
	// (accepted, redirected or refused).
	EventCompletionChecked = "CompletionChecked"
	// EventChangeRecorded: the git workspace's change was read into the task's
	// change ConfigMap; EventChangeNotRecorded: it could not be, and why.
	EventChangeRecorded    = "ChangeRecorded"
	EventChangeNotRecorded = "ChangeNotRecorded"
	// EventWorkspaceNotCloned: spec.workspace.git could not be cloned (the Ready
	// condition's reason says why); one per failed attempt, so that an attempt
	// tried again leaves its failure behind.
	EventWorkspaceNotCloned = "WorkspaceNotCloned"
	// EventWorkspaceCopied: spec.workspace.copyOf's workspace was copied into the
	// task's claim.
	EventWorkspaceCopied = "WorkspaceCopied"
)

// +kubebuilder:rbac:groups=toolgate.dev,resources=agenttasks,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=agenttasks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolintents,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=toolgate.dev,resources=approvals,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=executions,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods/exec,verbs=create;get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// AgentTaskReconciler provisions a task's workspace, rebuilds its status from its
// intents (counts, turn, conditions) and ends it when a budget is spent, its owner
// marks it done or cancels it. A task that has ended stops the calls it still runs:
// it deletes their Jobs, and their Executions end Aborted. With spec.agent.model it also runs the agent loop
// (agentloop.go).
type AgentTaskReconciler struct {
	client.Client
	// APIReader reads turn records around the cache: a record just written must be
	// seen (or the model would be asked twice for a turn), and the controller should
	// not cache every ConfigMap of the cluster. It reads only the metadata of API key
	// Secrets (their label); their data comes from the cache, which holds only
	// labelled Secrets.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Options   Options
	Recorder  events.EventRecorder
	Now       func() time.Time
	// NewModel makes the model client of a task; NewModelClient by default.
	NewModel ModelFactory
	// ModelRetryDelay is the wait after a temporary model error with no Retry-After;
	// DefaultModelRetryDelay when zero.
	ModelRetryDelay time.Duration
	// Policies reads the policies a final answer is checked against.
	Policies *policyset.Cache
	// Logs reads the log of a change pod (its diff).
	Logs executor.LogReader
	// modelWaits maps a task's UID to its modelWait.
	modelWaits sync.Map
	// archiveErr is the archive's last failure for retention, at archiveErrAt: for
	// archiveRetryAfter, retention does not ask it (retention.go).
	archiveMu    sync.Mutex
	archiveErr   error
	archiveErrAt time.Time
}

func setupAgentTask(mgr ctrl.Manager, opts Options) error {
	r, err := newAgentTaskReconciler(mgr, opts)
	if err != nil {
		return err
	}
	return r.SetupWithManager(mgr)
}

func newAgentTaskReconciler(mgr ctrl.Manager, opts Options) (*AgentTaskReconciler, error) {
	logs := opts.LogReader
	if logs == nil {
		clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return nil, fmt.Errorf("creating the clientset that reads pod logs: %w", err)
		}
		logs = executor.PodLogReader{Clientset: clientset}
	}
	return &AgentTaskReconciler{
		Logs:      logs,
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Options:   opts,
		Recorder:  mgr.GetEventRecorder("toolgate-task"),
		Now:       opts.clock(),
		NewModel:  NewModelClient,
		Policies:  opts.policySet(),
	}, nil
}

// SetupWithManager registers the reconciler.
func (r *AgentTaskReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.AgentTask{}).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: r.Options.Workers.orDefault().Task}).
		Owns(&corev1.PersistentVolumeClaim{}).
		// A claim named by spec.workspace.existingClaim may be created after its task.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.tasksOfClaim), builder.WithPredicates(claimCameOrWent)).
		// The task's workspace pods (clone, change, push, copy) report their results.
		Owns(&corev1.Pod{}).
		// A task waiting to copy another's workspace (spec.workspace.copyOf) goes on
		// when that task appears or its workspace is seeded.
		Watches(&v1.AgentTask{}, handler.EnqueueRequestsFromMapFunc(r.tasksCopying), builder.WithPredicates(copySourceChanged)).
		// An intent names its task in spec.taskRef (it is owned by the task too, once
		// created by the agent loop or kubectl toolgate propose, or adopted).
		Watches(&v1.ToolIntent{}, enqueueTaskOfIntent, builder.WithPredicates(taskSummaryChanged)).
		// An Execution that gets its Job after the task ended must be stopped too.
		Watches(&v1.Execution{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: o.(*v1.Execution).Spec.TaskRef.Name}}}
		}), builder.WithPredicates(executionGotJob)).
		Named("agenttask").
		Complete(r)
}

// Reconcile moves one AgentTask forward.
func (r *AgentTaskReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	task := &v1.AgentTask{}
	if err := r.Get(ctx, req.NamespacedName, task); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !task.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("agenttask", klog.KObj(task))
	ctx = ctrl.LoggerInto(ctx, log)

	world, created, cloneWait, err := r.observe(ctx, task)
	if err != nil {
		return ctrl.Result{}, err
	}
	var step agentStep
	if task.Spec.Agent.Model != nil {
		if step, err = r.runAgentLoop(ctx, task, &world); err != nil {
			return ctrl.Result{}, err
		}
	}
	status := pipeline.TaskStatus(task, world, metav1.NewTime(r.Now()))
	applyModelRefusal(&status, step)
	if !equality.Semantic.DeepEqual(task.Status, status) {
		before := task.Status.DeepCopy()
		task.Status = status
		if err := r.Status().Update(ctx, task); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: time.Second}, nil
			}
			return ctrl.Result{}, err
		}
		r.emit(log, task, before, created)
	}
	// Only once the history that counts them is written.
	deleteWait, err := r.deleteRetired(ctx, task, world.Intents)
	if err != nil {
		return ctrl.Result{}, err
	}
	expireWait, gone, err := r.expire(ctx, task, world.Intents)
	if err != nil || gone {
		return ctrl.Result{}, err
	}
	cloneWait = soonest(cloneWait, soonest(deleteWait, expireWait))
	r.reportTurn(ctx, task, step)
	// Before the push's change is read: a task that pushes keeps no session.
	sessionsWait, err := r.keepSessions(ctx, task, status)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The push's change, while it is read, has the claim to itself: a diff asked
	// for meanwhile is answered after.
	changeRequest := task.Annotations[v1.AnnotationChangeRequest]
	if pushReading(task) {
		changeRequest = ""
	}
	changeWait, err := r.recordChange(ctx, task, changeRequest)
	if err != nil {
		return ctrl.Result{}, err
	}
	pushWait, err := r.preparePush(ctx, task, world.Push)
	if err != nil {
		return ctrl.Result{}, err
	}
	cloneWait = soonest(soonest(cloneWait, changeWait), pushWait)
	if why, ended := taskEnded(task, status); ended || cancelledCalls(world.Intents) {
		running, err := r.stopRunningCalls(ctx, task, why, world.Intents)
		if err != nil {
			return ctrl.Result{}, err
		}
		if running {
			// A call to stop has not finished: look again until it has, so that a
			// Job the cache had not shown yet is stopped too, whatever wakes this
			// task or not.
			return ctrl.Result{RequeueAfter: stopRecheck}, nil
		}
	}
	return ctrl.Result{RequeueAfter: soonest(soonest(step.retryAfter, sessionsWait), cloneWait)}, nil
}

// soonest is the shorter of two waits, a zero wait being none.
func soonest(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// taskEnded reports whether the task has ended, and why, by pipeline.TaskFinished's
// rule applied to the status just computed (not yet written).
func taskEnded(task *v1.AgentTask, status v1.AgentTaskStatus) (string, bool) {
	now := *task
	now.Status = status
	if ended, how := pipeline.TaskFinished(&now); ended {
		return fmt.Sprintf("AgentTask %s ended (%s)", task.Name, how), true
	}
	return "", false
}

// cancelledCalls says whether a call of intents that has not been observed was
// cancelled by its proposer (spec.cancel): it may be running, and is stopped.
func cancelledCalls(intents []v1.ToolIntent) bool {
	for i := range intents {
		if intents[i].Spec.Cancel && intents[i].Status.Observation == nil {
			return true
		}
	}
	return false
}

// stopRunningCalls deletes the Job of every unfinished Execution of the task that
// must stop (pipeline.CallStopped): all of them once the task ended (ended says
// why, "" while it runs), so that a call approved (or allowed) before the task ended
// does not go on running after it, and any whose intent its proposer cancelled.
// The deletion is foreground, so the Job is gone only once its pod is: the runner is
// terminated, kills the tool, and the Execution reconciler projects the deleted Job as
// Aborted (executed, effects unknown), which the intent observes. Only a Job the
// Execution controls is deleted: a Job of the same name that is not its own is not
// this call's. intents are the task's.
func (r *AgentTaskReconciler) stopRunningCalls(ctx context.Context, task *v1.AgentTask, ended string, intents []v1.ToolIntent) (running bool, err error) {
	var execs v1.ExecutionList
	if err := r.List(ctx, &execs, client.InNamespace(task.Namespace), client.MatchingFields{IndexExecutionTask: task.Name}); err != nil {
		return false, err
	}
	byName := make(map[string]*v1.ToolIntent, len(intents))
	for i := range intents {
		byName[intents[i].Name] = &intents[i]
	}
	log := ctrl.LoggerFrom(ctx)
	for i := range execs.Items {
		exec := &execs.Items[i]
		if exec.Spec.TaskRef.Name != task.Name || executor.IsFinished(&exec.Status) || !exec.DeletionTimestamp.IsZero() {
			continue
		}
		intent := byName[exec.Spec.IntentRef.Name]
		why := pipeline.CallStopped(ended, intent)
		if why == "" {
			continue
		}
		running = true
		job := &batchv1.Job{}
		key := client.ObjectKey{Namespace: exec.Namespace, Name: executor.JobName(exec)}
		if err := kube.GetFresh(ctx, r.Client, r.APIReader, key, job); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return false, err
		}
		if !metav1.IsControlledBy(job, exec) || !job.DeletionTimestamp.IsZero() {
			continue
		}
		err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &job.UID})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			continue
		case err != nil:
			return false, err
		}
		r.Recorder.Eventf(task, exec, corev1.EventTypeWarning, EventCallStopped, EventCallStopped,
			"stopped Execution %s of intent %s: deleted its Job %s because %s", exec.Name, exec.Spec.IntentRef.Name, job.Name, why)
		kv := []any{"audit", true, "step", EventCallStopped, "namespace", task.Namespace, "task", task.Name,
			"execution", exec.Name, "intent", exec.Spec.IntentRef.Name, "job", job.Name, "why", why}
		if ended == "" {
			kv = append(kv, "cancelledBy", pipeline.CancelledBy(intent))
		}
		log.Info("stopped a running call", kv...)
	}
	return running, nil
}

// observe ensures the workspace claim (and its clone, for spec.workspace.git, or
// its copy, for spec.workspace.copyOf) and gathers the task's intents and
// approvals. wait is when to look at a clone or copy again.
func (r *AgentTaskReconciler) observe(ctx context.Context, task *v1.AgentTask) (world pipeline.TaskWorld, created bool, wait time.Duration, err error) {
	ready, reason, msg, created, err := r.ensureWorkspace(ctx, task)
	if err != nil {
		return world, false, 0, err
	}
	world.WorkspaceReady, world.WorkspaceReason, world.WorkspaceMessage, world.Workspace = ready, reason, msg, task.Status.Workspace
	var seed func(context.Context, *v1.AgentTask, string) (workspaceSeed, error)
	switch {
	case task.Spec.Workspace.Git != nil:
		seed = r.cloneWorkspace
	case task.Spec.Workspace.CopyOf != nil:
		seed = r.copyWorkspace
	}
	if ready && seed != nil {
		g, err := seed(ctx, task, pipeline.WorkspaceClaimName(task))
		if err != nil {
			return world, false, 0, err
		}
		world.Workspace, world.WorkspaceReady, world.WorkspaceReason, world.WorkspaceMessage, wait = g.status, g.ready, g.reason, g.msg, g.wait
		world.WorkspaceFailed = g.failed
	}

	var intents v1.ToolIntentList
	if err := r.List(ctx, &intents, client.InNamespace(task.Namespace), client.MatchingFields{IndexIntentTask: task.Name}); err != nil {
		return world, false, 0, err
	}
	world.Intents = intents.Items
	var approvals v1.ApprovalList
	if err := r.List(ctx, &approvals, client.InNamespace(task.Namespace), client.MatchingFields{IndexApprovalTask: task.Name}); err != nil {
		return world, false, 0, err
	}
	world.Approvals = int32(len(approvals.Items))
	if world.Push, err = r.observePush(ctx, task, world.Intents); err != nil {
		return world, false, 0, err
	}
	var retireWait time.Duration
	world.Archive, world.Retire, retireWait = r.retirable(ctx, task, world.Intents, world.Push)
	return world, created, soonest(wait, retireWait), nil
}

// ensureWorkspace checks the existing claim, or creates the claim the task owns;
// reason and msg say why it is not ready.
func (r *AgentTaskReconciler) ensureWorkspace(ctx context.Context, task *v1.AgentTask) (ready bool, reason, msg string, created bool, err error) {
	name := pipeline.WorkspaceClaimName(task)
	pvc := &corev1.PersistentVolumeClaim{}
	err = r.Get(ctx, client.ObjectKey{Namespace: task.Namespace, Name: name}, pvc)
	switch {
	case err == nil && task.Spec.Workspace.ExistingClaim == "" && !metav1.IsControlledBy(pvc, task):
		// A claim of the task's own name that is not the task's: using it would let
		// whoever may create a task write into a claim others use, by its name (a
		// copyOf copies into it, a clone clones into it, before any call is decided).
		return false, v1.ReasonWorkspaceClaimNotOwned, fmt.Sprintf("PersistentVolumeClaim %s exists and is not this task's (spec.workspace.volumeClaim makes a claim of the task's own, controlled by it): delete the claim, give the task another name, or name the claim as spec.workspace.existingClaim", name), false, nil
	case err == nil:
		return true, "", "", false, nil
	case !apierrors.IsNotFound(err):
		return false, "", "", false, err
	case task.Spec.Workspace.ExistingClaim != "":
		return false, "", fmt.Sprintf("PersistentVolumeClaim %q named by spec.workspace.existingClaim does not exist in namespace %s; create it or name another", name, task.Namespace), false, nil
	}
	vc := task.Spec.Workspace.VolumeClaim
	storage := vc.Storage
	if storage.IsZero() {
		storage = resource.MustParse("1Gi")
	}
	pvc = &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: task.Namespace, Labels: map[string]string{v1.LabelTask: task.Name}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: vc.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: storage}},
		},
	}
	if len(validation.IsValidLabelValue(task.Name)) > 0 {
		delete(pvc.Labels, v1.LabelTask)
	}
	if err := controllerutil.SetControllerReference(task, pvc, r.Scheme); err != nil {
		return false, "", "", false, err
	}
	switch err := r.Create(ctx, pvc); {
	case apierrors.IsAlreadyExists(err):
		// Made meanwhile, by this controller (its cache had not seen it yet) or by
		// someone else: whose it is is looked at when it is seen.
		return false, "", fmt.Sprintf("PersistentVolumeClaim %s was just created; waiting to see it", name), false, nil
	case err != nil:
		return false, "", "", false, err
	}
	return true, "", "", true, nil
}

// tasksOfClaim maps a claim to the tasks that name it as spec.workspace.existingClaim,
// and to the task whose own claim would have its name (one that waits for a claim
// in the way to go).
func (r *AgentTaskReconciler) tasksOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	var tasks v1.AgentTaskList
	if err := r.List(ctx, &tasks, client.InNamespace(o.GetNamespace()), client.MatchingFields{IndexTaskExistingClaim: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the tasks that name a claim: they are not woken", "claim", klog.KObj(o))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(tasks.Items)+1)
	if owner, ok := pipeline.TaskOfOwnedClaim(o.GetName()); ok && metav1.GetControllerOf(o) == nil {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: owner}})
	}
	for i := range tasks.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&tasks.Items[i])})
	}
	return reqs
}

// emit sends events for what changed, after the status write succeeded.
func (r *AgentTaskReconciler) emit(log logr.Logger, task *v1.AgentTask, before *v1.AgentTaskStatus, createdClaim bool) {
	if createdClaim {
		r.Recorder.Eventf(task, nil, corev1.EventTypeNormal, EventWorkspaceCreated, EventWorkspaceCreated, "created PersistentVolumeClaim %s", task.Status.WorkspaceClaimName)
	}
	if ws := task.Status.Workspace; ws != nil && ws.CopiedAt != nil && task.Spec.Workspace.CopyOf != nil && (before.Workspace == nil || before.Workspace.CopiedAt == nil) {
		r.Recorder.Eventf(task, nil, corev1.EventTypeNormal, EventWorkspaceCopied, EventWorkspaceCopied, "copied the workspace of AgentTask %s (claim %s) into %s with pod %s; %d entries left out",
			task.Spec.Workspace.CopyOf.TaskRef.Name, ws.CopiedFrom, task.Status.WorkspaceClaimName, ws.CopyPodName, ws.CopySkipped)
	}
	if now := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady); now != nil && gitFailure(now.Reason) {
		if was := meta.FindStatusCondition(before.Conditions, v1.ConditionReady); was == nil || was.Reason != now.Reason || was.Message != now.Message {
			r.Recorder.Eventf(task, nil, corev1.EventTypeWarning, EventWorkspaceNotCloned, EventWorkspaceNotCloned, "%s: %s", now.Reason, mask.Secrets(now.Message))
		}
	}
	for _, c := range []struct {
		typ, reason, kind string
	}{
		{v1.ConditionSucceeded, EventTaskSucceeded, corev1.EventTypeNormal},
		{v1.ConditionFailed, EventTaskFailed, corev1.EventTypeWarning},
		{v1.ConditionAwaitingApproval, EventAwaitingApproval, corev1.EventTypeNormal},
	} {
		now := meta.FindStatusCondition(task.Status.Conditions, c.typ)
		if now == nil || now.Status != metav1.ConditionTrue || meta.IsStatusConditionTrue(before.Conditions, c.typ) {
			continue
		}
		message := mask.Secrets(now.Message)
		r.Recorder.Eventf(task, nil, c.kind, c.reason, c.reason, "%s: %s", now.Reason, message)
		log.Info(message, "audit", true, "step", c.reason, "namespace", task.Namespace, "task", task.Name, "reason", now.Reason)
	}
}
