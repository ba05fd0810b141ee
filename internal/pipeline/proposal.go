package pipeline

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
)

// NextIndex is the first free index in a turn of a task's intents.
func NextIndex(intents []v1.ToolIntent, turn int32) int32 {
	next := int32(0)
	for i := range intents {
		if intents[i].Spec.Turn == turn && intents[i].Spec.Index >= next {
			next = intents[i].Spec.Index + 1
		}
	}
	return next
}

// Proposal is the ToolIntent an external agent's proposer creates (kubectl toolgate
// propose, the MCP endpoint): in the task's current turn, at the
// next free index, requested by the caller, claiming those of the caller's groups
// that the task names as proposers (ClaimedGroups).
func Proposal(task *v1.AgentTask, existing []v1.ToolIntent, tool v1.ToolName, input json.RawMessage, reason, requestedBy string, groups []string, proposedBy v1.ProposedBy) *v1.ToolIntent {
	turn := task.Status.Turn
	// Owned by its task from the start, as the controller would adopt it: one write
	// less on the call's path to its Job. blockOwnerDeletion stays unset, which a
	// proposer may set without the right to update the task's finalizers.
	owner := metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))
	owner.BlockOwnerDeletion = nil
	return &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{GenerateName: task.Name + "-", Namespace: task.Namespace, OwnerReferences: []metav1.OwnerReference{*owner}},
		Spec: v1.ToolIntentSpec{
			TaskRef:           v1.LocalObjectReference{Name: task.Name},
			Turn:              turn,
			Index:             NextIndex(existing, turn),
			Tool:              tool,
			Input:             runtime.RawExtension{Raw: input},
			Reason:            reason,
			RequestedBy:       requestedBy,
			RequestedByGroups: ClaimedGroups(task, groups),
			ProposedBy:        proposedBy,
		},
	}
}

// ClaimedGroups are the caller's groups that the task lets propose: a proposer by
// group is let in only when the intent claims the group. Only those are claimed, not
// every group the caller is in: the intent records them for good (its spec is
// immutable) and an API server may know a user in more groups than the field holds.
func ClaimedGroups(task *v1.AgentTask, groups []string) []string {
	if task.Spec.Agent.External == nil {
		return nil
	}
	var out []string
	for _, g := range groups {
		if slices.Contains(task.Spec.Agent.External.Proposers.Groups, g) && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// WaitingFor says what an unobserved intent waits for: the last pipeline step that
// is not done yet, with its condition's reason and message.
func WaitingFor(in *v1.ToolIntent) string {
	for _, typ := range []string{v1.ConditionExecuted, v1.ConditionApproved, v1.ConditionDecided, v1.ConditionValidated} {
		if c := meta.FindStatusCondition(in.Status.Conditions, typ); c != nil && c.Status != metav1.ConditionTrue {
			return fmt.Sprintf("%s: %s", c.Reason, mask.Secrets(c.Message))
		}
	}
	switch {
	case in.Status.Validation == nil:
		return "validation (the controller has not seen the intent yet)"
	case in.Status.Decision == nil:
		return "a decision"
	case in.Status.ExecutionName != "":
		return "Execution " + in.Status.ExecutionName + " to finish"
	}
	return "the next pipeline step"
}
