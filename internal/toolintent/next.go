package toolintent

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Next is the one step to take now for the intent in w. It is pure: every fact it
// needs and does not have is asked for with a Read step, and it is asked again once
// that fact is in the World. A reconcile ends at a step whose Action ends it.
//
// The stages, in order: validate; end a call whose task ended or whose proposer
// cancelled it; decide; end a call that cannot run where it was decided, or whose
// turn a Stop or Redirect consumed; ask a human (Ask); run (hold for the workspace
// and the batch, decide again, name the Execution, create it); observe.
func Next(w *World) Step {
	st := &w.Intent.Status
	if !w.Task.Known {
		return read(NeedTask)
	}
	if st.Validation == nil {
		return validate(w)
	}
	task := w.Task.Value
	if len(st.Validation.Errors) > 0 || task == nil {
		// Ended by validation; or the task vanished after it (its deletion
		// removes its intents too).
		return end()
	}
	waiting := st.ExecutionName == ""
	if waiting {
		if s, ok := taskEnded(w); ok {
			return s
		}
		if w.Intent.Spec.Cancel {
			return cancelled(w)
		}
	}
	if st.Decision == nil {
		return decide(w)
	}
	if waiting {
		if s, ok := notWhereDecided(w); ok {
			return s
		}
		if s, ok := consumeTurn(w); ok {
			return s
		}
		if st.Decision.Action == v1.DecisionAsk {
			if s, ok := approve(w); ok {
				return s
			}
		}
		return execute(w)
	}
	if w.ExecutionNamed {
		// Named by this reconcile: create it now, without reading it first.
		return createExecution(w)
	}
	return observe(w)
}

func read(n Need) Step { return Step{Do: Read, Need: n} }

func end() Step { return Step{Do: End} }

// finish ends the intent with its observation: the terminal change of every intent.
func finish(w *World, c Change, obs *v1.Observation) Step {
	c.Observation = obs
	msg := fmt.Sprintf("outcome %s; executed: %t", obs.Outcome, obs.Executed)
	c.Conditions = append(c.Conditions, Condition(w.Intent, v1.ConditionObserved, true, v1.ReasonObservationWritten, msg))
	d := w.Intent.Status.Decision
	if c.Decision != nil {
		d = c.Decision
	}
	if d != nil {
		// The one event of an allowed call says how it was decided (see Event.AuditOnly).
		msg = fmt.Sprintf("%s; decided %s by %s", msg, d.Action, d.PolicyRuleRef)
	}
	c.Events = append(c.Events, event(EventObserved, obs.Outcome != v1.OutcomeSucceeded, nil, "%s", msg))
	return Step{Do: End, Change: c}
}

// refuse ends a call that never ran: Executed is false (NotExecuted) with
// executedMsg, and the observation is a refusal with outcome and why.
func refuse(w *World, c Change, outcome v1.Outcome, executedMsg, why string) Step {
	c.Conditions = append(c.Conditions, Condition(w.Intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, executedMsg))
	return finish(w, c, pipeline.Refusal(outcome, why, w.Now))
}

// validate runs both validation layers and records the result; a failure ends the
// intent with a ValidationFailed observation.
func validate(w *World) Step {
	in := pipeline.ValidateInput{Intent: w.Intent, Task: w.Task.Value, ControllerIdentity: w.ControllerIdentity}
	if w.Task.Value != nil {
		if !w.TaskIntents.Known {
			return read(NeedTaskIntents)
		}
		// The task's retired calls (status.history) count as if still here.
		history := w.History()
		earlier := pipeline.Earlier(w.Intent, pipeline.LiveIntents(history, w.TaskIntents.Value))
		in.EarlierIntents, in.Baselines = pipeline.RetiredCount(history)+len(earlier), pipeline.HistoryBaselines(history, earlier)
	}
	v := pipeline.Validate(in)
	c := Change{Validation: v.Status()}
	if len(v.Errors) > 0 {
		reason := pipeline.ValidationReason(v.Errors)
		c.Conditions = []metav1.Condition{Condition(w.Intent, v1.ConditionValidated, false, v1.ReasonInputInvalid, reason)}
		c.Events = []Event{event(EventValidationFailed, true, nil, "validation failed: %s", reason)}
		return finish(w, c, pipeline.Refusal(v1.OutcomeValidationFailed, reason, w.Now))
	}
	msg := "input is valid"
	if v.TimeoutClamped {
		msg = fmt.Sprintf("input is valid; the timeout was clamped to the task's maximum of %ds", v.TimeoutSeconds)
	}
	c.Conditions = []metav1.Condition{Condition(w.Intent, v1.ConditionValidated, true, v1.ReasonInputValid, msg)}
	c.Events = []Event{audit(EventValidated, "%s", msg)}
	return Step{Do: Update, Change: c}
}

// taskEnded ends a call that has not run when its task ended while it waited (for
// a decision, a human or its batch), or another call of the task was decided Stop
// (the task's status says so a moment later, and no call of it starts meanwhile).
func taskEnded(w *World) (Step, bool) {
	task := w.Task.Value
	done, why := pipeline.TaskClosed(task)
	if !done {
		if !w.Stops.Known {
			return read(NeedStops), true
		}
		done, why = stoppedBy(w)
	}
	if !done {
		return Step{}, false
	}
	reason := fmt.Sprintf("AgentTask %s ended before this call ran (%s).", task.Name, why)
	return refuse(w, Change{}, v1.OutcomeAborted, reason, reason), true
}

// stoppedBy says whether a call of another turn of the task was decided Stop, or
// any other call's result was stopped by a result rule. A Stop decision's own turn
// is consumed by the Stop itself (consumeTurn), with the result that says so.
func stoppedBy(w *World) (bool, string) {
	intent, task := w.Intent, w.Task.Value
	for i := range w.Stops.Value {
		s := &w.Stops.Value[i]
		d := s.Status.Decision
		if s.Name == intent.Name || d == nil || (d.Sandbox != nil && d.Sandbox.TaskUID != string(task.UID)) {
			continue
		}
		if pipeline.ResultStopped(s.Status.Observation) {
			// The call ran, and a result rule stopped the task: nothing of it
			// starts any more, its own turn's calls included.
			return true, fmt.Sprintf("%s: the result of ToolIntent %s was stopped by rule %s", v1.ReasonPolicyStopped, s.Name, s.Status.Observation.ResultCheck.PolicyRuleRef)
		}
		sameBatch := len(pipeline.TurnSiblings(intent, []v1.ToolIntent{*s}, string(task.UID))) == 1
		if sameBatch || d.Action != v1.DecisionStop {
			continue
		}
		return true, fmt.Sprintf("%s: ToolIntent %s was decided Stop by rule %s", v1.ReasonPolicyStopped, s.Name, d.PolicyRuleRef)
	}
	return false, ""
}

// cancelled ends a call its proposer cancelled (spec.cancel) before it ran. An
// Approval it waits on is retired, as for a call its turn's Stop or Redirect
// consumes, so that nobody approves a call that will not run.
func cancelled(w *World) Step {
	intent := w.Intent
	by := pipeline.CancelledBy(intent)
	ref := intent.Status.ApprovalName
	if ref == "" && intent.Status.Decision != nil && intent.Status.Decision.Action == v1.DecisionAsk {
		// Created by a pass whose status write did not land.
		ref = pipeline.ApprovalName(intent)
	}
	var c Change
	var retire *Retirement
	if ref != "" {
		a, ok := approvalNamed(w, ref)
		if !ok {
			return readApproval(ref, true)
		}
		if retirable(intent, a) {
			retire = &Retirement{Approval: a, State: v1.ApprovalStateSuperseded,
				Message: fmt.Sprintf("not used: ToolIntent %s was cancelled by %s (spec.cancel), and it does not run", intent.Name, by)}
			c.ApprovalName = &a.Name
			c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionApproved, false, v1.ReasonCancelled, "not used: the call was cancelled by "+by))
		}
	}
	c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionExecuted, false, v1.ReasonCancelled, pipeline.CancelledBeforeRunReason(intent)))
	c.Events = append(c.Events, event(EventCancelled, true, nil, "cancelled by %s (spec.cancel) before it ran; nothing was executed", by))
	s := finish(w, c, pipeline.CancelledBeforeRun(intent, w.Now))
	s.Retire = retire
	return s
}

// notWhereDecided ends a call that has not run yet when it can no longer run where
// it was decided to: its decision records no sandbox (decided before decisions
// recorded one, so where it would run could only be read from the task as it is
// now, which is not what was decided or approved), or its task is not the task it
// was decided for (deleted and created again under the same name: another UID).
// Nothing runs; the model may propose the call again.
func notWhereDecided(w *World) (Step, bool) {
	intent, task := w.Intent, w.Task.Value
	d := intent.Status.Decision
	if d.Action == v1.DecisionDeny || d.Action == v1.DecisionRedirect || d.Action == v1.DecisionStop || intent.Status.Observation != nil {
		return Step{}, false
	}
	var reason string
	switch {
	case d.Sandbox == nil:
		reason = "this call was decided by an earlier version of toolgate, whose decisions did not record the sandbox the call runs in; it does not run in a sandbox nobody decided on. Propose the call again."
	case d.Sandbox.TaskUID != string(task.UID):
		reason = fmt.Sprintf("AgentTask %s was deleted and created again since this call was decided (uid %s then, %s now); the call was decided, and any approval given, for the earlier task, and it does not run in the new one. Propose the call again.", task.Name, d.Sandbox.TaskUID, task.UID)
	default:
		return Step{}, false
	}
	return refuse(w, Change{}, v1.OutcomeAborted, reason, reason), true
}

// consumeTurn ends a call that has not started when a call of its turn (itself
// included) was decided Stop or Redirect: nothing of such a turn runs. An Approval
// the call waits on is retired, so that nobody approves a call that will not run.
func consumeTurn(w *World) (Step, bool) {
	if !w.Turn.Known {
		return read(NeedTurn), true
	}
	by := pipeline.TurnConsumer(w.Turn.Value)
	if by == nil {
		return Step{}, false
	}
	intent := w.Intent
	if by.Name == intent.Name {
		// Its own decision in force: the one recorded here, not the cache's.
		by = intent
	}
	var retire *Retirement
	if ref := intent.Status.ApprovalName; ref != "" {
		a, ok := approvalNamed(w, ref)
		if !ok {
			return readApproval(ref, true), true
		}
		if retirable(intent, a) {
			retire = &Retirement{Approval: a, State: v1.ApprovalStateSuperseded,
				Message: fmt.Sprintf("not used: ToolIntent %s of the same turn was decided %s by %s, and nothing of the turn runs", by.Name, by.Status.Decision.Action, by.Status.Decision.PolicyRuleRef)}
		}
	}
	s := consumed(w, Change{}, by)
	s.Retire = retire
	return s, true
}

// consumed ends the call that by's Stop or Redirect keeps from running; the turn's
// calls that had started are named in the result.
func consumed(w *World, c Change, by *v1.ToolIntent) Step {
	obs, reason, msg := pipeline.Consumed(w.Intent, by, pipeline.StartedCalls(w.Turn.Value), w.Now)
	c.Conditions = append(c.Conditions, Condition(w.Intent, v1.ConditionExecuted, false, reason, msg))
	return finish(w, c, obs)
}

// approvalNamed is the Approval of that name, once it was read (through the cache
// or around it: the same fact to Next).
func approvalNamed(w *World, name string) (*v1.Approval, bool) {
	if !w.Approval.Known || w.Approval.Value.Name != name {
		return nil, false
	}
	return w.Approval.Value.Value, true
}

func readApproval(name string, fresh bool) Step {
	return Step{Do: Read, Need: NeedApproval, ApprovalName: name, FromAPIServer: fresh}
}

// retirable says whether a is the intent's own Approval, not used yet.
func retirable(intent *v1.ToolIntent, a *v1.Approval) bool {
	return a != nil && metav1.IsControlledBy(a, intent) && a.Status.State != v1.ApprovalStateConsumed
}

// inTheWay ends the intent without running anything because an object of the name
// it needs is not its own.
func inTheWay(w *World, c Change, kind, name, problem string) Step {
	reason := fmt.Sprintf("%s; nothing was executed. Delete %s %s and propose the call again.", problem, kind, name)
	c.Events = append(c.Events, event(EventObjectInTheWay, true, nil, "%s", reason))
	return refuse(w, c, v1.OutcomeFailed, reason, reason)
}

// executedReason is the reason of the intent's Executed condition ("" for none).
func executedReason(intent *v1.ToolIntent) string {
	if c := meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionExecuted); c != nil {
		return c.Reason
	}
	return ""
}
