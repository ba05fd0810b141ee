package pipeline

import (
	"k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// AwaitsApproval says whether an intent waits for a human: it was decided Ask and has
// no observation yet and no execution.
func AwaitsApproval(intent *v1.ToolIntent) bool {
	return intent.Status.Decision != nil &&
		intent.Status.Decision.Action == v1.DecisionAsk &&
		intent.Status.Observation == nil &&
		intent.Status.ExecutionRef == "" &&
		!meta.IsStatusConditionTrue(intent.Status.Conditions, v1.ConditionApproved)
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
		undecided := s.Status.Decision == nil && s.Status.Observation == nil
		if undecided || AwaitsApproval(s) {
			out = append(out, s.Name)
		}
	}
	return out
}
