package toolintent

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
)

// holdResult keeps a call's output from the model while a Result rule's Ask waits
// for a human: the intent has no observation (so the model's next turn waits,
// as for any call in flight) until the output's own Approval (request.result,
// pipeline.BuildResultApproval) is decided. Approved, the model gets what the rules
// left of the output; denied, expired, retired or bound to another output, it gets
// a fixed refusal. The Approval has a deterministic name and the intent controls
// it: a pass that created it and crashed before recording the hold finds it on
// the next pass (read from the API server), never a second one.
func holdResult(w *World, c Change, done *v1.Execution, made *v1.Observation, verdict policy.ResultVerdict) Step {
	intent := w.Intent
	if verdict.Check == nil || verdict.Check.Action != v1.RuleAsk {
		return heldNoLonger(w, c, made, verdict)
	}
	if !w.ResultApproval.Known {
		return read(NeedResultApproval)
	}
	// Measured once, with the observation (Change.Ran goes with it).
	ran := c.Ran
	c.Ran = nil
	a := w.ResultApproval.Value
	held := pipeline.ApplyResult(made, verdict)
	if a == nil && !pipeline.ResultAwaitsRelease(intent) {
		// The hold is recorded before its Approval exists. A pass that created the
		// Approval and lost the status write would find, if the policies changed in
		// between, no hold and no Ask, and hand the model the output nobody
		// released; recorded first, every later pass holds it (heldNoLonger when the
		// rules no longer ask). The status write brings the pass that asks.
		c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionObserved, false, v1.ReasonResultAwaitingRelease,
			fmt.Sprintf("the call ran; rule %s holds its output from the model until a human releases it (its Approval is being requested)", held.ResultCheck.PolicyRuleRef)))
		return Step{Do: End, Change: c}
	}
	if a == nil {
		// Counted just before the Approval is made, as late as can be: a turn's
		// other held calls that made theirs by now are counted.
		if !w.OtherApprovals.Known {
			return read(NeedOtherApprovals)
		}
		if why := pipeline.ResultAskLimit(w.Task.Value.Spec.Budgets.MaxApprovalRequests, w.OtherApprovals.Value, w.History(), intent); why != "" {
			c.Ran = ran
			obs := pipeline.ApplyRelease(made, verdict, pipeline.ReleaseRefused, why)
			c.Events = append(c.Events, event(EventResultChecked, true, nil, "result rules: %s", resultEffects(obs.ResultCheck)))
			return finish(w, c, obs)
		}
		ttl := defaultApprovalTTL
		if task := w.Task.Value; task != nil && task.Spec.Budgets.ApprovalTTLSeconds > 0 {
			ttl = time.Duration(task.Spec.Budgets.ApprovalTTLSeconds) * time.Second
		}
		ask := pipeline.BuildResultApproval(intent, done, held, verdict, w.Input(), ttl, w.Now)
		c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionObserved, false, v1.ReasonResultAwaitingRelease,
			fmt.Sprintf("the call ran; rule %s holds its output from the model until a human releases it (Approval %s, until %s)", held.ResultCheck.PolicyRuleRef, ask.Name, ask.Spec.ExpiresAt.UTC().Format(time.RFC3339))))
		c.Events = append(c.Events, event(EventResultHeld, false, ask, "the output is held for a human by rule %s: Approval %s requested from %s", held.ResultCheck.PolicyRuleRef, ask.Name, approversText(ask.Spec.Approvers)))
		return Step{Do: RequestApproval, Approval: ask, Change: c}
	}
	var release pipeline.ResultRelease
	var why string
	if !metav1.IsControlledBy(a, intent) {
		release, why = pipeline.ReleaseRefused, fmt.Sprintf("output withheld: Approval %s is not this ToolIntent's", a.Name)
	} else {
		release, why = pipeline.JudgeRelease(a, pipeline.ResultFingerprint(intent, done, held))
	}
	if release == pipeline.ReleaseWait {
		if pipeline.ResultAwaitsRelease(intent) {
			return end()
		}
		c.Conditions = append(c.Conditions, Condition(intent, v1.ConditionObserved, false, v1.ReasonResultAwaitingRelease,
			fmt.Sprintf("the call ran; rule %s holds its output from the model until a human releases it (Approval %s)", held.ResultCheck.PolicyRuleRef, a.Name)))
		return Step{Do: End, Change: c}
	}
	c.Ran = ran
	obs := pipeline.ApplyRelease(made, verdict, release, why)
	c.Events = append(c.Events, event(EventResultChecked, release != pipeline.Released, a, "result rules: %s", resultEffects(obs.ResultCheck)))
	return finish(w, c, obs)
}

// heldNoLonger ends an intent whose output was held for a human when the result
// rules, checked again, no longer ask for it: the policies changed while it was
// held. A rule that now stops the task or replaces the output acts as on any
// result; otherwise nobody released the output, so the model gets the fixed
// refusal, as a call whose Approval's deciding policy changed is refused, never
// run. Whoever can edit a policy cannot release what a rule's approvers were to.
func heldNoLonger(w *World, c Change, made *v1.Observation, verdict policy.ResultVerdict) Step {
	if verdict.Check != nil && (verdict.Check.Action == v1.RuleStop || verdict.Check.Action == v1.RuleReplace) {
		obs := pipeline.ApplyResult(made, verdict)
		c.Events = append(c.Events, event(EventResultChecked, true, nil, "result rules: %s", resultEffects(obs.ResultCheck)))
		return finish(w, c, obs)
	}
	if verdict.Check == nil {
		verdict.Check = &v1.ResultCheck{Action: v1.RuleAllow}
	}
	why := "output withheld: it was held for a human, the rule that held it no longer decides (the policies changed while it was held), and nobody released it"
	obs := pipeline.ApplyRelease(made, verdict, pipeline.ReleaseRefused, why)
	c.Events = append(c.Events, event(EventResultChecked, true, nil, "result rules: %s", resultEffects(obs.ResultCheck)))
	return finish(w, c, obs)
}
