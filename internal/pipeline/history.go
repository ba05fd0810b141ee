package pipeline

import (
	"encoding/json"
	"fmt"
	"sort"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Earlier returns the task's intents that come before intent (by turn, index,
// creation), in that order.
func Earlier(intent *v1.ToolIntent, all []v1.ToolIntent) []v1.ToolIntent {
	var out []v1.ToolIntent
	for i := range all {
		if all[i].Name != intent.Name && IntentBefore(&all[i], intent) {
			out = append(out, all[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return IntentBefore(&out[i], &out[j]) })
	return out
}

// Baselines collects, from intents in order, the last known content hash of every
// file they read or wrote successfully: the baseline a later edit is checked against.
func Baselines(ordered []v1.ToolIntent) map[string]Baseline {
	out := map[string]Baseline{}
	for i := range ordered {
		in := &ordered[i]
		obs := in.Status.Observation
		if obs == nil || obs.Outcome != v1.OutcomeSucceeded || obs.ContentSHA256 == "" {
			continue
		}
		if p, ok := FilePath(in); ok {
			// In order, so a later observation of the same path wins.
			out[p] = Baseline{SHA256: obs.ContentSHA256, Intent: in.Name}
		}
	}
	return out
}

// FilePath is the workspace path a read_file, write_file or edit_file intent acts on.
func FilePath(intent *v1.ToolIntent) (string, bool) {
	switch intent.Spec.Tool {
	case v1.ToolReadFile, v1.ToolWriteFile, v1.ToolEditFile:
	default:
		return "", false
	}
	var in struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(intent.Spec.Input.Raw, &in); err != nil || in.Path == "" {
		return "", false
	}
	p, err := WorkspacePath(in.Path)
	return p, err == nil
}

// RuleID names the deciding rule as "Kind/policy/rule", or the rule alone when the
// task's mode decided.
func RuleID(d *v1.Decision) string {
	if d.Policy == "" {
		return d.Rule
	}
	return d.Policy + "/" + d.Rule
}

// ApplyAskLimits turns an Ask into a Deny when a human already denied this exact call
// (same fingerprint) in one of the task's other approvals, or when those approvals
// used the task's approval requests (limit is budgets.maxApprovalRequests).
func ApplyAskLimits(d *v1.Decision, limit int32, others []v1.Approval) {
	if d.Action != v1.DecisionAsk {
		return
	}
	for i := range others {
		a := &others[i]
		if a.Spec.Fingerprint == d.Fingerprint && a.Spec.Decision == v1.DecisionDenied {
			d.Action = v1.DecisionDeny
			d.Reason = fmt.Sprintf("this exact call was already denied by %s in Approval %s; it is not asked again (rule %s said: %s)", a.Spec.DecidedBy, a.Name, RuleID(d), d.Reason)
			return
		}
	}
	if used := len(others); used >= int(limit) {
		d.Action = v1.DecisionDeny
		d.Reason = fmt.Sprintf("the task's approval-request limit is reached (%d of budgets.maxApprovalRequests=%d); the call would need a human (rule %s said: %s)", used, limit, RuleID(d), d.Reason)
	}
}
