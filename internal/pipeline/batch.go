package pipeline

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// AwaitsApproval says whether an intent waits for a human: it was decided Ask and has
// no observation yet and no execution, and it is not held for its batch (an asked
// call is held only once its approval was approved: it waits for its siblings, not
// for a person; counted as waiting, two approved calls of a turn would hold each
// other back for ever).
func AwaitsApproval(intent *v1.ToolIntent) bool {
	held := meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionExecuted)
	return intent.Status.Decision != nil &&
		intent.Status.Decision.Action == v1.DecisionAsk &&
		intent.Status.Observation == nil &&
		intent.Status.ExecutionName == "" &&
		!meta.IsStatusConditionTrue(intent.Status.Conditions, v1.ConditionApproved) &&
		(held == nil || held.Reason != v1.ReasonWaitingForSiblings)
}

// BlockingSiblings returns the siblings (same task and turn, other names) that hold
// intent back under batch preflight: while any call of a turn waits for a human, no
// other call of that turn executes, so the human decides with the batch unchanged.
// An intent not yet decided also blocks, because it may yet become an Ask.
func BlockingSiblings(intent *v1.ToolIntent, turnIntents []v1.ToolIntent) []string {
	var out []string
	for i := range turnIntents {
		s := &turnIntents[i]
		if s.Name == intent.Name || s.Spec.TaskRef.Name != intent.Spec.TaskRef.Name || s.Spec.Turn != intent.Spec.Turn {
			continue
		}
		if HoldsSiblings(s) {
			out = append(out, s.Name)
		}
	}
	return out
}

// HoldsSiblings says whether s holds back the other calls of its turn: it is not
// decided yet (it may become an Ask), or it waits for a human.
func HoldsSiblings(s *v1.ToolIntent) bool {
	undecided := s.Status.Decision == nil && s.Status.Observation == nil
	return undecided || AwaitsApproval(s)
}

// TurnSiblings keeps of turnIntents (the intents of intent's task name and turn,
// itself included) the ones of its batch: proposed by the same requester, and not
// belonging to another task of the same name (another owner, or decided for
// another task UID). An intent anyone else created under the same turn number never
// completes, holds or consumes the batch.
func TurnSiblings(intent *v1.ToolIntent, turnIntents []v1.ToolIntent, taskUID string) []v1.ToolIntent {
	out := make([]v1.ToolIntent, 0, len(turnIntents))
	for _, s := range turnIntents {
		if s.Spec.TaskRef.Name != intent.Spec.TaskRef.Name || s.Spec.Turn != intent.Spec.Turn || s.Spec.RequestedBy != intent.Spec.RequestedBy {
			continue
		}
		if owner := metav1.GetControllerOf(&s); owner != nil && string(owner.UID) != taskUID {
			continue
		}
		if d := s.Status.Decision; d != nil && d.Sandbox != nil && d.Sandbox.TaskUID != taskUID {
			continue
		}
		out = append(out, s)
	}
	return out
}

// ConsumesTurn says whether s's decision in force keeps every call of its turn from
// running: a Stop or a Redirect.
func ConsumesTurn(s *v1.ToolIntent) bool {
	d := s.Status.Decision
	return d != nil && (d.Action == v1.DecisionStop || d.Action == v1.DecisionRedirect)
}

// TurnConsumer returns the call of the turn whose decision consumes every call of it
// that has not started: a Stop (the first by index), else a Redirect (the first by
// index); nil when there is none. A consumed call never runs: the batch semantics of
// docs/policy.md ("a turn with a Stop or a Redirect runs none of its calls").
func TurnConsumer(turnIntents []v1.ToolIntent) *v1.ToolIntent {
	var stop, redirect *v1.ToolIntent
	for i := range turnIntents {
		s := &turnIntents[i]
		d := s.Status.Decision
		if d == nil {
			continue
		}
		switch d.Action {
		case v1.DecisionStop:
			if stop == nil || IntentBefore(s, stop) {
				stop = s
			}
		case v1.DecisionRedirect:
			if redirect == nil || IntentBefore(s, redirect) {
				redirect = s
			}
		}
	}
	if stop != nil {
		return stop
	}
	return redirect
}

// Consumed is the observation of a call that does not run because by (itself, or
// another call of its turn) was decided Stop or Redirect, and the reason its
// Executed condition gives.
//
// started names the calls of the turn that had started before the Stop or Redirect
// was recorded (a decision made again just before running can come after a sibling
// ran): the result says they ran, never that nothing did.
func Consumed(intent, by *v1.ToolIntent, started []string, now time.Time) (obs *v1.Observation, reason, message string) {
	d := by.Status.Decision
	rule := d.PolicyRuleRef.String()
	nothing, stoppedTurn, redirectedTurn := "Nothing of this turn ran", "Nothing of a stopped turn runs", "no call of a redirected turn runs"
	if len(started) > 0 {
		ran := fmt.Sprintf("Of this turn only %s, which had started, ran", strings.Join(started, ", "))
		nothing, stoppedTurn, redirectedTurn = ran, ran, strings.ToLower(ran[:1])+ran[1:]
	}
	switch {
	case d.Action == v1.DecisionStop && by.Name == intent.Name:
		reason = v1.ReasonTurnStopped
		message = fmt.Sprintf("Rule %s stopped the task: %s. %s, and the task takes no more turns.", rule, d.Reason, nothing)
	case d.Action == v1.DecisionStop:
		reason = v1.ReasonTurnStopped
		message = fmt.Sprintf("ToolIntent %s (call %d of this turn) was stopped by rule %s: %s. %s, and the task takes no more turns.", by.Name, by.Spec.Index, rule, d.Reason, stoppedTurn)
	case by.Name == intent.Name:
		reason = v1.ReasonTurnRedirected
		message = fmt.Sprintf("Rule %s redirected this call: %s. %s. Follow the policy's instruction, then propose a new call.", rule, d.Reason, nothing)
	default:
		reason = v1.ReasonTurnRedirected
		message = fmt.Sprintf("ToolIntent %s (call %d of this turn) was redirected by rule %s, and %s. Follow the policy's instruction, then propose this call again if you still need it.", by.Name, by.Spec.Index, rule, redirectedTurn)
	}
	outcome := v1.OutcomeRedirected
	if d.Action == v1.DecisionStop {
		outcome = v1.OutcomeStopped
	}
	obs = Refusal(outcome, message, now)
	if d.Action == v1.DecisionRedirect && by.Name == intent.Name {
		obs.Instruction = d.Instruction
	}
	return obs, reason, message
}

// StartedCalls names the calls of the turn that have an Execution.
func StartedCalls(turnIntents []v1.ToolIntent) []string {
	var out []string
	for i := range turnIntents {
		if turnIntents[i].Status.ExecutionName != "" {
			out = append(out, turnIntents[i].Name)
		}
	}
	return out
}

// MissingSiblings are the indexes of the calls of intent's turn that its turnCalls
// announce and that do not exist yet: a Redirect or Stop among them would consume
// this call, so it does not run before they are created and decided.
func MissingSiblings(intent *v1.ToolIntent, turnIntents []v1.ToolIntent) []int32 {
	n := intent.Spec.TurnCalls
	if n <= 0 {
		return nil
	}
	seen := make([]bool, n)
	for i := range turnIntents {
		s := &turnIntents[i]
		if s.Spec.TaskRef.Name == intent.Spec.TaskRef.Name && s.Spec.Turn == intent.Spec.Turn && s.Spec.Index < n {
			seen[s.Spec.Index] = true
		}
	}
	var missing []int32
	for i, ok := range seen {
		if !ok {
			missing = append(missing, int32(i))
		}
	}
	return missing
}
