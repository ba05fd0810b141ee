package toolintent

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// requeueSoon is when to look again after a write that wakes nothing (an Approval's
// status written by this reconcile, a conflict).
const requeueSoon = time.Second

// defaultApprovalTTL is how long an Approval waits when the task sets no budget.
const defaultApprovalTTL = time.Hour

// approve asks a human for an Ask (the intent's Approval is created), or acts on the
// decision the Approval records. It returns no step when the call may go on to run.
func approve(w *World) (Step, bool) {
	intent := w.Intent
	if intent.Status.Decision.GrantRef != nil {
		// Allowed on a grant whose use this intent recorded: it runs on it.
		return Step{}, false
	}
	name := pipeline.ApprovalName(intent)
	a, ok := approvalNamed(w, name)
	if !ok {
		return readApproval(name, false), true
	}
	if a == nil {
		if s, ok := useGrant(w); ok {
			return s, true
		}
		return requestApproval(w), true
	}
	if !metav1.IsControlledBy(a, intent) {
		// An Approval of this name that is not this intent's (a leftover of an
		// earlier intent of the same name) is never judged for it.
		return inTheWay(w, Change{}, "Approval", a.Name, fmt.Sprintf("Approval %s is not controlled by this ToolIntent (UID %s)", a.Name, intent.UID)), true
	}
	if intent.Status.ApprovalName != a.Name {
		return Step{Do: Update, Change: Change{ApprovalName: &a.Name}}, true
	}
	if !w.Fingerprint.Known {
		return read(NeedFingerprint), true
	}
	execName := pipeline.ExecutionName(intent)
	switch pipeline.JudgeApproval(a, w.Fingerprint.Value, execName) {
	case pipeline.VerdictWait:
		return end(), true
	case pipeline.VerdictDenied:
		return approvalRefused(w, a, v1.OutcomeApprovalDenied, v1.ReasonApprovalDenied, EventApprovalDenied, "approval denied", pipeline.DeniedReason(a)), true
	case pipeline.VerdictExpired:
		reason := fmt.Sprintf("Approval %s expired at %s without a decision.", a.Name, a.Spec.ExpiresAt.UTC().Format(time.RFC3339))
		if a.Status.DecidedAt != nil {
			reason = fmt.Sprintf("Approval %s expired at %s: it was %s.", a.Name, a.Spec.ExpiresAt.UTC().Format(time.RFC3339), a.Status.Message)
		}
		return approvalRefused(w, a, v1.OutcomeApprovalExpired, v1.ReasonApprovalExpired, EventApprovalExpired, "approval expired", reason), true
	case pipeline.VerdictSuperseded:
		// Retired by a decision made again in an earlier pass whose status write did
		// not land: decide again; it is never used, even if the policies changed back.
		if s, stop := recheck(w, a); stop {
			return s, true
		}
		reason := fmt.Sprintf("Approval %s was retired (%s) and is not used; nothing was executed. Propose the call again.", a.Name, a.Status.Message)
		return approvalRefused(w, a, v1.OutcomeApprovalDenied, v1.ReasonFingerprintMismatch, EventApprovalRefused, "approval retired", reason), true
	case pipeline.VerdictMismatch, pipeline.VerdictConsumedElsewhere:
		reason := fmt.Sprintf("Approval %s does not match this call any more (its fingerprint %s, the call's now %s: the deciding policy changed since it was asked); the approval is refused and nothing was executed", a.Name, short(a.Spec.Fingerprint), short(w.Fingerprint.Value))
		var retire *Retirement
		if a.Status.State == v1.ApprovalStateConsumed {
			reason = fmt.Sprintf("Approval %s was already used by Execution %s; an approval is used once", a.Name, a.Status.ConsumedByExecutionName)
		} else {
			retire = &Retirement{Approval: a, State: a.Status.State, Message: "approved, but refused by the controller: " + reason}
		}
		s := approvalRefused(w, a, v1.OutcomeApprovalDenied, v1.ReasonFingerprintMismatch, EventApprovalRefused, "approval refused", reason)
		s.Retire = retire
		return s, true
	}
	// Approved, for this very call. Batch preflight before the approval is used.
	if s, held := holdForSiblings(w); held {
		return s, true
	}
	approvedBy := pipeline.CountVotes(a).Voters()
	granted := Change{
		Conditions: []metav1.Condition{Condition(intent, v1.ConditionApproved, true, v1.ReasonApprovalGranted, fmt.Sprintf("approved by %s", approvedBy))},
		Events:     []Event{event(EventApprovalGranted, false, a, "approved by %s; Approval %s consumed by Execution %s", approvedBy, a.Name, execName)},
	}
	if a.Status.State != v1.ApprovalStateConsumed && !w.ApprovalUsed {
		// The last moment before the approval is used: the policies in force may
		// have changed while it waited (an emergency Deny, a rule that asks).
		if s, stop := recheck(w, a); stop {
			return s, true
		}
		return Step{Do: UseApproval, Change: granted, Retire: &Retirement{Approval: a, State: v1.ApprovalStateConsumed, ConsumedBy: execName, Message: "used by Execution " + execName}}, true
	}
	if !w.ApprovalUsed && !meta.IsStatusConditionTrue(intent.Status.Conditions, v1.ConditionApproved) {
		// Used by an earlier pass whose status write did not land.
		return Step{Do: Update, Change: granted}, true
	}
	return Step{}, false
}

// requestApproval creates the intent's Approval. Its state (Pending, then the
// decision or the expiry) is the Approval reconciler's to record; a change of it
// wakes this intent.
func requestApproval(w *World) Step {
	intent, task := w.Intent, w.Task.Value
	ttl := time.Duration(task.Spec.Budgets.ApprovalTTLSeconds) * time.Second
	if ttl <= 0 {
		ttl = defaultApprovalTTL
	}
	a := pipeline.BuildApproval(intent, intent.Status.Decision, w.Input(), ttl, w.Now)
	c := Change{ApprovalName: &a.Name}
	c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionApproved, false, v1.ReasonApprovalPending, fmt.Sprintf("waiting for a decision on Approval %s until %s", a.Name, a.Spec.ExpiresAt.UTC().Format(time.RFC3339))))
	c.Events = append(c.Events, event(EventApprovalRequested, false, a, "Approval %s requested from %s for %s", a.Name, approversText(a.Spec.Approvers), intent.Status.Decision.PolicyRuleRef))
	return Step{Do: RequestApproval, Approval: a, Change: c}
}

// approvalRefused ends a call whose Approval does not let it run.
func approvalRefused(w *World, a *v1.Approval, outcome v1.Outcome, reason, eventReason, what, why string) Step {
	c := Change{
		Conditions: []metav1.Condition{Condition(w.Intent, v1.ConditionApproved, false, reason, why)},
	}
	s := refuse(w, c, outcome, what+"; nothing was executed", why)
	// The approval's event comes before the observation's.
	s.Change.Events = append([]Event{event(eventReason, true, a, "%s", why)}, s.Change.Events...)
	return s
}

// holdForSiblings is batch preflight: while a call of the same turn waits for a
// human (or is announced and not created yet), this one does not run.
func holdForSiblings(w *World) (Step, bool) {
	if !w.Turn.Known {
		return read(NeedTurn), true
	}
	intent := w.Intent
	blocking := pipeline.BlockingSiblings(intent, w.Turn.Value)
	missing := pipeline.MissingSiblings(intent, w.Turn.Value)
	if len(blocking) == 0 && len(missing) == 0 {
		return Step{}, false
	}
	msg := fmt.Sprintf("held: sibling intents of turn %d wait for a decision: %v", intent.Spec.Turn, blocking)
	if len(missing) > 0 {
		msg = fmt.Sprintf("held: turn %d has %d calls (spec.turnCalls) and calls %v of it do not exist yet; waiting for a decision on %v", intent.Spec.Turn, intent.Spec.TurnCalls, missing, blocking)
	}
	return hold(w, v1.ReasonWaitingForSiblings, EventHeldForSiblings, msg), true
}

// hold ends the reconcile with the Executed condition saying why the call waits;
// its event is sent when the reason or message changed.
func hold(w *World, reason, eventReason, msg string) Step {
	c := Change{Conditions: []metav1.Condition{Condition(w.Intent, v1.ConditionExecuted, false, reason, msg)}}
	if cur := meta.FindStatusCondition(w.Intent.Status.Conditions, v1.ConditionExecuted); cur == nil || cur.Reason != reason || cur.Message != msg {
		c.Events = append(c.Events, event(eventReason, false, nil, "%s", msg))
	}
	return Step{Do: End, Change: c}
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
