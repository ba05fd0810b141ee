package pipeline

import (
	"k8s.io/apimachinery/pkg/api/meta"

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
		intent.Status.ExecutionRef == "" &&
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
