package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// The predicates below keep the secondary watches to the changes that can move the
// object they wake: without them, every status write of a task woke each of its open
// intents, and every step of an intent woke its siblings, its task and its
// Execution, each reconcile reading the world again for nothing. Each one says what
// the woken reconciler reads of the watched object; a change of anything else cannot
// change what it does. The primary watch (For) of every reconciler takes every event.

// siblingHoldChanged passes an intent change that can release a sibling held for
// its batch (pipeline.BlockingSiblings), or end it: the intent stopped, or started,
// holding its turn back, was decided (again) Stop or Redirect, or it is gone. A new
// intent only ever adds a hold.
var siblingHoldChanged = predicate.TypedFuncs[client.Object]{
	CreateFunc: func(event.TypedCreateEvent[client.Object]) bool { return false },
	UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
		old, oldOK := e.ObjectOld.(*v1.ToolIntent)
		now, nowOK := e.ObjectNew.(*v1.ToolIntent)
		return !oldOK || !nowOK || pipeline.HoldsSiblings(old) != pipeline.HoldsSiblings(now) ||
			pipeline.ConsumesTurn(old) != pipeline.ConsumesTurn(now)
	},
}

// taskEndingChanged passes a task change an open intent acts on: the task appeared
// (an intent may have waited for it), went, was recreated, changed its spec (mode,
// proposers, budgets), finished cloning its workspace (calls wait for it), or ended
// (its calls that have not run are aborted). Its
// counts and conditions otherwise change with every call and matter to none.
var taskEndingChanged = predicate.TypedFuncs[client.Object]{
	UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
		old, oldOK := e.ObjectOld.(*v1.AgentTask)
		now, nowOK := e.ObjectNew.(*v1.AgentTask)
		if !oldOK || !nowOK {
			return true
		}
		oldDone, _ := pipeline.TaskFinished(old)
		nowDone, _ := pipeline.TaskFinished(now)
		return oldDone != nowDone || old.UID != now.UID || old.Generation != now.Generation || !now.DeletionTimestamp.Equal(old.DeletionTimestamp) ||
			pipeline.WorkspaceCloned(old) != pipeline.WorkspaceCloned(now)
	},
}

// intentChainChanged passes the intent changes a pending chain check
// (pipeline.CheckChain, ErrChainPending) waits for: the Execution it names, its
// decision, its approval. The other fields the check reads (deletion, validation,
// observation) can only break a chain; that is found by the check before the Job and
// by the chainRecheck of a waiting Execution, not by this watch. It also passes the
// proposer's cancel (spec.cancel), which stops a call that runs in a session.
var intentChainChanged = predicate.TypedFuncs[client.Object]{
	UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
		old, oldOK := e.ObjectOld.(*v1.ToolIntent)
		now, nowOK := e.ObjectNew.(*v1.ToolIntent)
		return !oldOK || !nowOK ||
			old.Status.ExecutionName != now.Status.ExecutionName ||
			old.Status.ApprovalName != now.Status.ApprovalName ||
			!equality.Semantic.DeepEqual(old.Status.Decision, now.Status.Decision) ||
			old.Spec.Cancel != now.Spec.Cancel
	},
}

// taskSummaryChanged passes an intent change that changes its task's status
// (pipeline.TaskStatus): its outcome, whether it (or its held output) waits for a
// human; or that its
// proposer cancelled it (spec.cancel), which the task acts on when the call runs
// (stopRunningCalls). Each wakes the task after taskSummaryDelay (see
// enqueueTaskOfIntent).
var taskSummaryChanged = predicate.TypedFuncs[client.Object]{
	UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
		old, oldOK := e.ObjectOld.(*v1.ToolIntent)
		now, nowOK := e.ObjectNew.(*v1.ToolIntent)
		return !oldOK || !nowOK || outcomeOf(old) != outcomeOf(now) || pipeline.AwaitsApproval(old) != pipeline.AwaitsApproval(now) ||
			pipeline.ResultAwaitsRelease(old) != pipeline.ResultAwaitsRelease(now) || old.Spec.Cancel != now.Spec.Cancel
	},
}

// executionGotJob passes an Execution that got its Job or its session: the moment
// its task, if it has ended, must stop it (AgentTaskReconciler.stopRunningCalls);
// and a session call that finished, which moves the session's idle timeout.
var executionGotJob = predicate.TypedFuncs[client.Object]{
	// A new Execution has no Job yet; waking the task for it would count the new
	// call now, a status write on the path to its Job (see taskCountDelay).
	CreateFunc: func(event.TypedCreateEvent[client.Object]) bool { return false },
	DeleteFunc: func(event.TypedDeleteEvent[client.Object]) bool { return false },
	UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
		old, oldOK := e.ObjectOld.(*v1.Execution)
		now, nowOK := e.ObjectNew.(*v1.Execution)
		return !oldOK || !nowOK || old.Status.JobName != now.Status.JobName || old.Status.SessionName != now.Status.SessionName ||
			// A session's last use moves its idle timeout (keepSessions).
			(now.Status.SessionName != "" && executor.IsFinished(&now.Status) != executor.IsFinished(&old.Status))
	},
}

// networkPolicyChanged passes a NetworkPolicy that was created, changed (its spec)
// or deleted: toolgate's fence of some calls' walls must be made again or refused,
// and any other policy may open the walls of the calls that have not ended, which
// then do not start, or stop (ExecutionReconciler.executionsBehind).
var networkPolicyChanged = predicate.TypedFuncs[client.Object]{
	UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration()
	},
}

// claimCameOrWent passes a claim that was created or deleted: whether a task
// naming it has its workspace (and so whether a task copying that one can).
var claimCameOrWent = predicate.TypedFuncs[client.Object]{
	UpdateFunc:  func(event.TypedUpdateEvent[client.Object]) bool { return false },
	GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return false },
}

func outcomeOf(in *v1.ToolIntent) v1.Outcome {
	if in.Status.Observation == nil {
		return ""
	}
	return in.Status.Observation.Outcome
}

// taskCountDelay is how long a task waits to count an intent that was just
// created, and taskSummaryDelay how long it waits after one of its intents ended or
// began to wait for a human. Counting each change at once would write the task's
// status on the path of every call to its Job, and once more for every call that
// ends; waiting lets the calls of a burst share one write (the work queue keeps one
// entry per task). A model's next turn starts taskSummaryDelay after the last call of
// its turn ended, which is little next to the model's own answer.
const (
	taskCountDelay   = time.Second
	taskSummaryDelay = 200 * time.Millisecond
)

// enqueueTaskOfIntent wakes an intent's task after taskCountDelay for a new intent,
// and after taskSummaryDelay for a change or a deletion.
var enqueueTaskOfIntent = handler.TypedFuncs[client.Object, reconcile.Request]{
	CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		addTaskOf(q, e.Object, taskCountDelay)
	},
	UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		addTaskOf(q, e.ObjectNew, taskSummaryDelay)
	},
	DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		addTaskOf(q, e.Object, taskSummaryDelay)
	},
	GenericFunc: func(_ context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		addTaskOf(q, e.Object, taskSummaryDelay)
	},
}

// addTaskOf queues the task of intent o after delay.
func addTaskOf(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object, delay time.Duration) {
	in, ok := o.(*v1.ToolIntent)
	if !ok {
		return
	}
	q.AddAfter(reconcile.Request{NamespacedName: client.ObjectKey{Namespace: in.Namespace, Name: in.Spec.TaskRef.Name}}, delay)
}
