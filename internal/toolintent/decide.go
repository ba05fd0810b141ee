package toolintent

import (
	"fmt"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// decide records the decision the policies in force give the call. Deny ends it;
// Redirect and Stop end it and consume its turn; Ask first checks the task's earlier
// denials and approval budget.
//
// The decision is recorded before anything acts on it (an Approval, an Execution):
// were its status write lost after a side effect, the next pass would decide again
// from nothing, perhaps otherwise, and leave an Execution that no recorded decision
// allows. An allowed call goes on in this reconcile (Update): the status write that
// names its Execution records the decision with it, before the Execution is created.
// Any other decision is written now (End).
func decide(w *World) Step {
	if !w.Decided.Known {
		return read(NeedDecided)
	}
	d := *w.Decided.Value
	if d.Action == v1.DecisionAsk {
		if !w.OtherApprovals.Known {
			return read(NeedOtherApprovals)
		}
		pipeline.ApplyAskLimits(&d, w.Task.Value.Spec.Budgets.MaxApprovalRequests, w.OtherApprovals.Value, w.History())
	}
	if (d.Action == v1.DecisionRedirect || d.Action == v1.DecisionStop) && !w.Turn.Known {
		return read(NeedTurn)
	}
	intent := w.Intent
	c := Change{Decision: &d, Counted: &d, FirstDecision: true}
	c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionDecided, true, string(d.Action), fmt.Sprintf("%s by %s: %s", d.Action, d.PolicyRuleRef, d.Reason)))
	if d.Action == v1.DecisionAllow {
		c.Events = append(c.Events, audit(EventDecided, "%s by %s: %s", d.Action, d.PolicyRuleRef.WithGeneration(), d.Reason))
	} else {
		c.Events = append(c.Events, event(EventDecided, d.Action != v1.DecisionAsk, nil, "%s by %s: %s", d.Action, d.PolicyRuleRef.WithGeneration(), d.Reason))
	}
	switch d.Action {
	case v1.DecisionAllow:
		return Step{Do: Update, Change: c}
	case v1.DecisionDeny:
		return refuse(w, c, v1.OutcomeDenied, "denied; nothing was executed", fmt.Sprintf("%s (rule %s)", d.Reason, d.PolicyRuleRef))
	case v1.DecisionRedirect, v1.DecisionStop:
		by := *intent
		by.Status.Decision = &d
		return consumed(w, c, &by)
	}
	return Step{Do: End, Change: c}
}

// rechecked says whether the decision in force was checked against the policies in
// force in this reconcile when it was made: made in it, unless the judge was asked
// (its wait comes between the policies read and the call). A decision made again in
// this reconcile is not looked at here: recheck compares it, and one not stricter
// lets the call go on there, as it would here.
func rechecked(w *World) bool {
	return w.Decided.Known && len(w.Intent.Status.Decision.JudgeVerdicts) == 0
}

// recheck decides the call again just before it runs (before its approval is used,
// or before an allowed call is named its Execution) and compares the result with the
// recorded decision (pipeline.Stricter): an emergency Deny added while the call
// waited for a human or for its batch, or a rule that now asks, stops it. A Deny ends
// the call Denied, nothing executed; an Ask supersedes the recorded decision and asks
// again with a new Approval (pipeline.ApprovalName), retiring approval (the one about
// to be used, nil for an allowed call) as Superseded. It returns the step to take
// when the call must not go on now.
func recheck(w *World, approval *v1.Approval) (Step, bool) {
	if !w.Rechecked.Known {
		return read(NeedRechecked), true
	}
	intent := w.Intent
	recorded := intent.Status.Decision
	now := *w.Rechecked.Value
	verdict, why := pipeline.Stricter(recorded, &now)
	if verdict == pipeline.RecheckAsk {
		if !w.OtherApprovals.Known {
			return read(NeedOtherApprovals), true
		}
		pipeline.ApplyAskLimits(&now, w.Task.Value.Spec.Budgets.MaxApprovalRequests, w.OtherApprovals.Value, w.History())
		if now.Action == v1.DecisionDeny {
			verdict, why = pipeline.RecheckDeny, why+"; and it may not be asked: "+now.Reason
		}
	}
	if verdict == pipeline.RecheckRun {
		if walls := pipeline.OutputCopyWalls(recorded, &now); walls != nil {
			// A Result rule came into force while the call waited: it runs as
			// decided, and its output stays out of the workspace.
			d := recorded.DeepCopy()
			d.Walls = walls
			return Step{Do: Update, Change: Change{Decision: d}}, true
		}
		return Step{}, false
	}
	canSupersede := len(intent.Status.SupersededDecisions)+1 < pipeline.MaxDecisions
	if verdict == pipeline.RecheckAsk && !canSupersede {
		verdict, why = pipeline.RecheckDeny, fmt.Sprintf("%s; the call was decided %d times while it waited, and is not asked again", why, pipeline.MaxDecisions)
	}
	if verdict == pipeline.RecheckDeny && (now.Action == v1.DecisionStop || now.Action == v1.DecisionRedirect) && !w.Turn.Known {
		// Its siblings that have not started see the new decision (consumeTurn).
		return read(NeedTurn), true
	}
	s := redecided(w, approval, &now, verdict, why)
	if approval != nil {
		// The Approval's retirement wakes nothing: look again in a moment.
		s.RequeueAfter = requeueSoon
	}
	return s, true
}

// redecided is the step of a call decided again, stricter than its recorded decision.
func redecided(w *World, approval *v1.Approval, now *v1.Decision, verdict pipeline.Recheck, why string) Step {
	intent := w.Intent
	c := Change{Counted: now}
	if verdict == pipeline.RecheckDeny {
		msg := fmt.Sprintf("decided again just before running, and denied: %s", why)
		var retire *Retirement
		if approval != nil {
			retire = &Retirement{Approval: approval, State: v1.ApprovalStateSuperseded, Message: "not used: the call was " + msg}
		}
		if now.Action != v1.DecisionAsk && now.Action != v1.DecisionAllow {
			// The Deny (Stop, Redirect) is the decision in force; the Approval the
			// call was asked by stays named, as the record of what was approved and
			// not used. Decided MaxDecisions times already, the decision that ends
			// the call is still the one in force (it ends it; nothing loops).
			ref := intent.Status.ApprovalName
			c.Supersede, c.ApprovalName = now, &ref
		}
		c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionDecided, true, v1.ReasonRedecided, msg))
		c.Events = append(c.Events, event(EventRedecided, true, approval, "%s", msg))
		var s Step
		if now.Action == v1.DecisionStop || now.Action == v1.DecisionRedirect {
			by := *intent
			by.Status.Decision = now
			s = consumed(w, c, &by)
		} else {
			rule := now.PolicyRuleRef.String()
			s = refuse(w, c, v1.OutcomeDenied, "denied when decided again before running; nothing was executed",
				fmt.Sprintf("The policies changed while this call waited to run. %s (rule %s): %s", now.Reason, rule, why))
		}
		s.Retire = retire
		return s
	}
	msg := fmt.Sprintf("decided again just before running, and asked again: %s", why)
	c.Supersede = now
	var retire *Retirement
	if approval != nil {
		next := *intent
		next.Status.SupersededDecisions = append(append([]v1.Decision(nil), intent.Status.SupersededDecisions...), *intent.Status.Decision)
		retire = &Retirement{Approval: approval, State: v1.ApprovalStateSuperseded,
			Message: "not used: the call was " + msg + "; Approval " + pipeline.ApprovalName(&next) + " asks"}
	}
	c.Conditions = append(c.Conditions,
		Condition(intent, v1.ConditionDecided, true, v1.ReasonRedecided, msg),
		Condition(intent, v1.ConditionApproved, false, v1.ReasonApprovalPending, msg),
		Condition(intent, v1.ConditionExecuted, false, v1.ReasonNotExecuted, "asked again; nothing was executed yet"))
	c.Events = append(c.Events, event(EventRedecided, true, approval, "%s", msg))
	return Step{Do: End, Change: c, Retire: retire}
}
