package controller

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/kube"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// defaultChainGrace is how long a new Execution waits for its ToolIntent to record
// it before it is refused (see authorize).
const defaultChainGrace = time.Minute

// chainRecheck is how often a waiting Execution looks at its intent again; the
// ToolIntent watch usually wakes it sooner.
const chainRecheck = 2 * time.Second

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
		if done, why, err := r.readTaskEnded(ctx, exec, pipeline.TaskClosed); err != nil || done {
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

// readTaskEnded reads the Execution's task from the API server (a task cancelled a
// moment ago must count: the cache may not show it yet) and says whether it ended by
// the rule: pipeline.TaskClosed for a call that has not started (a task being
// deleted starts none), pipeline.TaskFinished for one that runs (it runs on through
// an orphaning deletion). A task that does not exist ends nothing here: the chain
// check already holds the Execution to its intent. A task that ends after this check
// stops its calls itself (AgentTaskReconciler.stopRunningCalls deletes their Jobs).
func (r *ExecutionReconciler) readTaskEnded(ctx context.Context, exec *toolgatev1alpha1.Execution, rule func(*toolgatev1alpha1.AgentTask) (bool, string)) (bool, string, error) {
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
