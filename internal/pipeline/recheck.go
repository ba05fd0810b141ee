package pipeline

import (
	"fmt"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Recheck is what deciding a call again, just before it runs, means for it.
type Recheck int

const (
	// RecheckRun: the policies in force now are not stricter than the recorded
	// decision; the call runs on it (and on its approval, if it was asked).
	RecheckRun Recheck = iota
	// RecheckDeny: the policies in force now deny the call; it ends Denied and
	// nothing runs.
	RecheckDeny
	// RecheckAsk: the policies in force now ask a human where the recorded decision
	// did not ask this one: the call asks again, under the new decision.
	RecheckAsk
)

// Stricter compares the decision made again just before a call runs (now) with the
// decision it was recorded with, and says whether the call may still run; when it
// may not, it also says, in words, what changed. The rule:
//
//   - now is Stop or Deny: Deny, whatever was recorded (an emergency Deny wins over
//     an approval already given); the call ends under the new decision (a Stop
//     stops the task).
//   - now is Redirect and the recorded decision is Allow: Deny (the call does not
//     run, and ends Redirected under the new decision). A Redirect does not undo an
//     approval: an approved Ask runs.
//   - now is Ask and the recorded decision is Allow: Ask (nobody approved it).
//   - now is Ask and the recorded decision is Ask by another rule (another policy,
//     or another rule of it, or the mode default where a rule asked, or the other
//     way round): Ask; the approval given was given under a rule that no longer
//     decides, which may name other approvers or say another reason.
//   - now is Ask by the same policy and rule: Run. A new generation of that policy
//     changes the fingerprint, and the approval is refused by it (JudgeApproval);
//     that is not this rule's concern.
//   - now is Allow: Run. Policies that loosened do not take away a question already
//     asked; a recorded Ask still runs only on its approval.
//
// The sandbox walls are not compared: they depend only on the call and the task's
// mode, and a mode that became ReadOnly denies every call that is not read-only.
// Whether the output may be copied into the workspace depends on the Result rules
// in force too, and OutputCopyWalls takes it from now.
func Stricter(recorded, now *v1.Decision) (Recheck, string) {
	switch {
	case now.Action == v1.DecisionDeny || now.Action == v1.DecisionStop:
		return RecheckDeny, fmt.Sprintf("the policies in force now deny it: %s by %s (was %s by %s when decided)", now.Action, ruleText(now), recorded.Action, ruleText(recorded))
	case now.Action == v1.DecisionRedirect && recorded.Action == v1.DecisionAllow:
		return RecheckDeny, fmt.Sprintf("the policies in force now redirect it: %s by %s (was %s by %s when decided)", now.Action, ruleText(now), recorded.Action, ruleText(recorded))
	case now.Action == v1.DecisionAsk && recorded.Action == v1.DecisionAllow:
		return RecheckAsk, fmt.Sprintf("the policies in force now ask a human: %s by %s (was %s by %s when decided)", now.Action, ruleText(now), recorded.Action, ruleText(recorded))
	case now.Action == v1.DecisionAsk && recorded.Action == v1.DecisionAsk && !now.PolicyRuleRef.SameRule(recorded.PolicyRuleRef):
		return RecheckAsk, fmt.Sprintf("another rule asks now: %s by %s (the approval was asked by %s)", now.Action, ruleText(now), ruleText(recorded))
	}
	return RecheckRun, ""
}

// OutputCopyWalls are the recorded decision's walls with the output kept out of the
// workspace, when the decision made again just before the call runs keeps it out and
// the recorded one does not (a Result rule came into force while the call waited);
// nil otherwise. The copy is not part of the fingerprint, so the call, and an
// approval given for it, stay the same. A copy the recorded decision keeps out stays
// out, whatever now says.
func OutputCopyWalls(recorded, now *v1.Decision) *v1.SandboxWalls {
	if now.Walls == nil || !now.Walls.NoOutputCopy || (recorded.Walls != nil && recorded.Walls.NoOutputCopy) {
		return nil
	}
	w := &v1.SandboxWalls{}
	if recorded.Walls != nil {
		w = recorded.Walls.DeepCopy()
	}
	w.NoOutputCopy = true
	w.Reason = now.Walls.Reason
	return w
}

// ruleText names a decision's rule with its policy's generation.
func ruleText(d *v1.Decision) string {
	return d.PolicyRuleRef.WithGeneration()
}

// MaxDecisions bounds how often one intent is decided: the first decision and its
// re-asks. A call whose policies keep changing while it waits ends instead.
const MaxDecisions = 1 + 8

// Supersede records that now replaces the intent's decision: the recorded one is kept
// in status.supersededDecisions and now is in force. It returns false, changing
// nothing, when the intent has been decided MaxDecisions times already.
func Supersede(intent *v1.ToolIntent, now *v1.Decision) bool {
	if len(intent.Status.SupersededDecisions)+1 >= MaxDecisions {
		return false
	}
	intent.Status.SupersededDecisions = append(intent.Status.SupersededDecisions, *intent.Status.Decision.DeepCopy())
	intent.Status.Decision = now
	intent.Status.ApprovalName = ""
	return true
}
