package toolintent

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
)

// execute names the intent's one Execution, built from the decision's records alone
// (the task as it is now plays no part), once nothing holds the call.
//
// Record first, then create. The intent this reconcile read (from the cache) may be
// older than the API server's: this controller's own last write not seen yet, or
// another replica's, which decided the call again (Ask, Deny) after this one
// rechecked it. Naming the Execution in the intent's status is a compare-and-swap on
// that version, so only a reconcile holding the latest intent gets past it; the
// others conflict and create nothing. A crash between the two writes leaves the
// intent naming an Execution that does not exist yet (ExecutionRequested), which the
// next pass creates (observe). For a call allowed in this reconcile, the same write
// records the decision.
func execute(w *World) Step {
	intent := w.Intent
	if a := intent.Status.Decision.Action; a != v1.DecisionAllow && a != v1.DecisionAsk {
		// Redirect and Stop end the call when decided; nothing else ever runs.
		return Step{Do: Fail, Err: fmt.Errorf("ToolIntent %s is decided %s and has no observation: it does not run", intent.Name, a)}
	}
	if s, held := holdForWorkspace(w); held {
		return s
	}
	if intent.Status.Decision.Action == v1.DecisionAllow {
		if s, held := holdForSiblings(w); held {
			return s
		}
		// The last moment before an allowed call runs; an asked one was checked
		// before its approval was used.
		if !rechecked(w) {
			if s, stop := recheck(w, nil); stop {
				return s
			}
		}
	}
	exec, err := pipeline.BuildExecution(intent)
	if err != nil {
		return Step{Do: Fail, Err: err}
	}
	c := Change{ExecutionName: &exec.Name}
	c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionExecuted, false, v1.ReasonExecutionRequested, fmt.Sprintf("Execution %s is requested; it runs once it has its Job", exec.Name)))
	return Step{Do: NameExecution, Change: c}
}

// holdForWorkspace holds a call of a task whose workspace is not cloned (or copied)
// yet: it would run on an empty or half-written worktree. The task's Ready
// condition says why; the task's watch wakes the call once the clone or copy is
// recorded.
func holdForWorkspace(w *World) (Step, bool) {
	task := w.Task.Value
	if pipeline.WorkspaceCloned(task) {
		return Step{}, false
	}
	seeded, why := "cloned its workspace (spec.workspace.git)", "the clone has not finished"
	if task.Spec.Workspace.CopyOf != nil {
		seeded, why = "copied its workspace (spec.workspace.copyOf)", "the copy has not finished"
	}
	if c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue && c.Message != "" {
		why = c.Reason + ": " + c.Message
	}
	msg := fmt.Sprintf("held: AgentTask %s has not %s yet (%s); the call runs once it has", task.Name, seeded, why)
	return hold(w, v1.ReasonWaitingForWorkspace, EventHeldForWorkspace, msg), true
}

// createExecution creates the Execution the intent names. One of that name that
// exists counts only when it is this intent's own (an earlier pass that created it
// and did not get to record it), never a leftover or a planted one.
func createExecution(w *World) Step {
	intent := w.Intent
	if w.ExistingExecution.Known {
		want, err := ownedExecution(intent)
		if err != nil {
			return Step{Do: Fail, Err: err}
		}
		if problem := pipeline.ExecutionMismatch(w.ExistingExecution.Value, want); problem != "" {
			none := ""
			return inTheWay(w, Change{ExecutionName: &none}, "Execution", want.Name, problem)
		}
	} else if !w.ExecutionCreated {
		exec, err := ownedExecution(intent)
		if err != nil {
			return Step{Do: Fail, Err: err}
		}
		return Step{Do: CreateExecution, Execution: exec}
	}
	// Executed stays ExecutionRequested until the Execution reports its Job
	// (observe): another status write now would be one more on the path to the Job.
	exec := intent.Status.ExecutionName
	c := Change{Dispatched: intent.Status.Decision.Action == v1.DecisionAllow}
	c.Events = append(c.Events, audit(EventExecutionRequested, "Execution %s created (timeout %ds, image %s)", exec, intent.Status.Decision.Sandbox.TimeoutSeconds, intent.Status.Decision.Sandbox.Profile.Image))
	return Step{Do: End, Change: c}
}

// ownedExecution is the Execution the intent creates, controlled by it: an existing
// one counts as the intent's only when the intent controls it (by UID).
func ownedExecution(intent *v1.ToolIntent) (*v1.Execution, error) {
	exec, err := pipeline.BuildExecution(intent)
	if err != nil {
		return nil, err
	}
	exec.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(intent, v1.GroupVersion.WithKind("ToolIntent"))}
	return exec, nil
}

// observe writes the observation once the Execution finished.
func observe(w *World) Step {
	intent := w.Intent
	if !w.Execution.Known {
		return read(NeedExecution)
	}
	exec := w.Execution.Value
	if exec == nil {
		if executedReason(intent) == v1.ReasonExecutionRequested {
			// Named, and not created yet: the pass that named it ended first. Unless
			// the cache is behind this controller's own last write (which recorded
			// the Execution running, before someone deleted it): creating it again
			// would run a call someone stopped. The intent is read from the API
			// server first; when it moved on, the watch brings the newer one.
			if !w.Stale.Known {
				return read(NeedStale)
			}
			if w.Stale.Value {
				return end()
			}
			return createExecution(w)
		}
		// Someone deleted the Execution: whether it ran is unknown.
		obs := pipeline.Refusal(v1.OutcomeAborted, fmt.Sprintf("Execution %s was deleted before it reported a result; the call may or may not have had effects.", intent.Status.ExecutionName), w.Now)
		obs.Executed = true
		c := Change{Conditions: []metav1.Condition{Condition(intent, v1.ConditionExecuted, true, v1.ReasonExecutionFinished, "the Execution was deleted")}}
		return finish(w, c, obs)
	}
	if !executor.IsFinished(&exec.Status) {
		return running(w, exec)
	}
	// The cache keeps no finished Execution's output: the observation is made from
	// the API server's copy, once it is that Execution, finished; otherwise the
	// watch brings the change (a delete, the cache catching up).
	if !w.FinishedExecution.Known {
		return read(NeedFinishedExecution)
	}
	done := w.FinishedExecution.Value
	if done == nil || done.UID != exec.UID || !executor.IsFinished(&done.Status) {
		return end()
	}
	if !w.ResultPolicies.Known {
		return read(NeedResultPolicies)
	}
	made := pipeline.CancelledWhileRunning(intent, pipeline.FromExecution(done, w.Now))
	verdict := checkResult(w, done, made)
	c := Change{Ran: done, Conditions: []metav1.Condition{Condition(intent, v1.ConditionExecuted, true, v1.ReasonExecutionFinished, fmt.Sprintf("Execution %s finished: %s", done.Name, made.Outcome))}}
	if (verdict.Check != nil && verdict.Check.Action == v1.RuleAsk) || pipeline.ResultAwaitsRelease(intent) {
		// Once held, only a human releases it (holdResult), whatever the policies
		// say by now.
		return holdResult(w, c, done, made, verdict)
	}
	obs := pipeline.ApplyResult(made, verdict)
	if rc := obs.ResultCheck; rc != nil {
		c.Events = append(c.Events, event(EventResultChecked, rc.Action == v1.RuleStop || rc.Action == v1.RuleReplace, nil, "result rules: %s", resultEffects(rc)))
	}
	return finish(w, c, obs)
}

// checkResult runs the result rules in force on the call's output before the model
// sees it (policy.CheckResult).
func checkResult(w *World, done *v1.Execution, obs *v1.Observation) policy.ResultVerdict {
	intent, task, rp := w.Intent, w.Task.Value, w.ResultPolicies.Value
	if rp == nil || task == nil {
		return policy.ResultVerdict{Summary: obs.Summary}
	}
	req := policy.ResultRequest{
		Call: policy.Request{
			Namespace: intent.Namespace, Task: task.Name, Mode: task.Spec.Mode,
			Tool: intent.Spec.Tool, Input: w.Input(), Fires: rp.Fires, Now: w.Now,
		},
		Result: pipeline.ResultOf(intent.Spec.Tool, w.Input(), done, obs),
	}
	v := policy.CheckResult(req, rp.Cluster, rp.Namespaced, rp.Broken)
	if rc := v.Check; rc != nil && rc.Action != v1.RuleAllow && done.Status.ArtifactPath != "" && len(rc.Effects) < policy.MaxResultEffects {
		// The call was decided before the rule was in force (a rule in scope
		// keeps the copy out: policy.Walls), so its output is in the workspace too.
		rc.Effects = append(rc.Effects, fmt.Sprintf("the full output was copied into the workspace (%s) before this rule applied to the call: a later call can read it there", done.Status.ArtifactPath))
	}
	return v
}

// resultEffects says in one line what the result rules did.
func resultEffects(rc *v1.ResultCheck) string {
	if len(rc.Effects) == 0 {
		return fmt.Sprintf("%s; %d rules matched without acting", rc.Action, len(rc.NonActingHits))
	}
	return strings.Join(rc.Effects, "; ")
}

// running records where a running Execution runs, and observes a background job
// that started: the call's result is that it did.
func running(w *World, exec *v1.Execution) Step {
	intent := w.Intent
	var c Change
	if executedReason(intent) == v1.ReasonExecutionRequested && (exec.Status.JobName != "" || exec.Status.SessionName != "") {
		// Recorded from here on, a missing Execution was deleted, never one to
		// create (the call may have run).
		where := "as Job " + exec.Status.JobName
		if exec.Status.JobName == "" {
			where = "in session pod " + exec.Status.SessionName
		}
		c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionExecuted, false, v1.ReasonExecutionCreated, fmt.Sprintf("Execution %s runs %s", exec.Name, where)))
	}
	if exec.Status.Background != nil {
		c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionExecuted, true, v1.ReasonBackgroundStarted, fmt.Sprintf("Execution %s runs on as a background job in session pod %s", exec.Name, exec.Status.SessionName)))
		return finish(w, c, pipeline.FromBackgroundStart(exec, w.Now))
	}
	return Step{Do: End, Change: c}
}
