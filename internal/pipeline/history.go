package pipeline

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/workspace"
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
	p, err := workspace.Rel(in.Path)
	return p, err == nil
}

// ApplyAskLimits turns an Ask into a Deny when a human already denied this exact call
// (same fingerprint) in one of the task's other approvals, or when those approvals
// used the task's approval requests (limit is budgets.maxApprovalRequests).
func ApplyAskLimits(d *v1.Decision, limit int32, others []v1.Approval, history *v1.CallHistory) {
	if d.Action != v1.DecisionAsk {
		return
	}
	if history != nil && slices.Contains(history.DeniedFingerprints, d.Fingerprint) {
		d.Action = v1.DecisionDeny
		d.Reason = fmt.Sprintf("this exact call was already denied by a human in an earlier call of this task (archived: status.history); it is not asked again (rule %s said: %s)", d.PolicyRuleRef.String(), d.Reason)
		return
	}
	for i := range others {
		a := &others[i]
		if t := CountVotes(a); a.Spec.Fingerprint == d.Fingerprint && t.Decision == v1.DecisionDenied {
			d.Action = v1.DecisionDeny
			d.Reason = fmt.Sprintf("this exact call was already denied by %s in Approval %s; it is not asked again (rule %s said: %s)", t.DeniedBy, a.Name, d.PolicyRuleRef.String(), d.Reason)
			return
		}
	}
	if used := approvalRequests(others, history); used >= int(limit) {
		d.Action = v1.DecisionDeny
		d.Reason = fmt.Sprintf("the task's approval-request limit is reached (%d of budgets.maxApprovalRequests=%d); the call would need a human (rule %s said: %s)", used, limit, d.PolicyRuleRef.String(), d.Reason)
	}
}

// ResultAskLimit says why a Result rule's Ask may not ask a human for the intent's
// output, or "" when it may: a release is a request to a human like a call's Ask, and
// counts against budgets.maxApprovalRequests (limit) with the task's other Approvals
// (others, the retired ones in history) and the intent's own call Approval. At the
// limit the output is withheld: an agent cannot page people without end by reading
// what a rule holds.
func ResultAskLimit(limit int32, others []v1.Approval, history *v1.CallHistory, intent *v1.ToolIntent) string {
	used := approvalRequests(others, history)
	if intent.Status.ApprovalName != "" {
		used++
	}
	if used < int(limit) {
		return ""
	}
	return fmt.Sprintf("output withheld: the task's approval-request limit is reached (%d of budgets.maxApprovalRequests=%d), so nobody was asked to release it", used, limit)
}

// approvalRequests is how many of the task's approval requests are used: its other
// Approvals in the cluster, and those of its retired calls (history).
func approvalRequests(others []v1.Approval, history *v1.CallHistory) int {
	used := len(others)
	if history != nil {
		used += int(history.ApprovalRequests)
	}
	return used
}

// RuleFires counts how often each rule with limits acted in a task: the Redirect
// decisions of its intents (every decision an intent had, superseded ones too, so a
// decision made again does not hide a fire), the Replace verdicts of its observations'
// result checks, and the Redirect and Deny verdicts of its completion checks. taskUID keeps out intents decided for an earlier task of the
// same name. The result is sorted by policy and rule, and is what maxFires and
// cooldownSeconds are enforced from; the task's status.ruleFires shows the
// v1.MaxRuleFires of it that fired last.
func RuleFires(taskUID string, intents []v1.ToolIntent, checks []v1.CompletionCheck) []v1.RuleFires {
	byKey := map[string]*v1.RuleFires{}
	turnFired := map[string]bool{}
	count := func(ref v1.PolicyRuleReference, on v1.RuleEvent, at *metav1.Time) {
		if ref.IsModeDefault() {
			return
		}
		fires := v1.NewRuleFires(ref, on)
		f := byKey[fires.ID]
		if f == nil {
			f = &fires
			byKey[fires.ID] = f
		}
		f.Fires++
		if at != nil && (f.LastFiredAt == nil || f.LastFiredAt.Before(at)) {
			t := *at
			f.LastFiredAt = &t
		}
	}
	for i := range intents {
		in := &intents[i]
		d := in.Status.Decision
		if d == nil || (d.Sandbox != nil && taskUID != "" && d.Sandbox.TaskUID != taskUID) {
			continue
		}
		at := metav1.NewTime(DecidedAt(in))
		for _, past := range append(append([]v1.Decision(nil), in.Status.SupersededDecisions...), *d) {
			// A rule fires once per turn, however many of the turn's calls it
			// redirected: a turn of harmless calls does not spend its maxFires.
			key := fmt.Sprintf("%s/%d", past.PolicyRuleRef, in.Spec.Turn)
			if past.Action == v1.DecisionRedirect && !turnFired[key] {
				turnFired[key] = true
				count(past.PolicyRuleRef, v1.WhenToolCall, &at)
			}
		}
	}
	for i := range intents {
		// A Replace result rule fires once per call whose output it replaced.
		in := &intents[i]
		if o := in.Status.Observation; o != nil && o.ResultCheck != nil && o.ResultCheck.Action == v1.RuleReplace && o.ResultCheck.PolicyRuleRef != nil {
			if d := in.Status.Decision; d != nil && d.Sandbox != nil && taskUID != "" && d.Sandbox.TaskUID != taskUID {
				continue
			}
			count(*o.ResultCheck.PolicyRuleRef, v1.WhenResult, o.ObservedAt)
		}
	}
	for _, c := range checks {
		if (c.Action == v1.DecisionRedirect || c.Action == v1.DecisionDeny) && c.PolicyRuleRef != nil {
			count(*c.PolicyRuleRef, v1.WhenCompletion, c.CheckedAt)
		}
	}
	out := make([]v1.RuleFires, 0, len(byKey))
	for _, f := range byKey {
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool { return ruleFiresBefore(out[i], out[j]) })
	return out
}

// ruleFiresBefore orders ruleFires by policy (as Kind/name), then rule.
func ruleFiresBefore(a, b v1.RuleFires) bool {
	if pa, pb := a.PolicyRuleRef.Policy(), b.PolicyRuleRef.Policy(); pa != pb {
		return pa < pb
	}
	return a.PolicyRuleRef.Rule < b.PolicyRuleRef.Rule
}

// FireCountsOf is fires as the policy engine takes them (policy.Request.Fires).
func FireCountsOf(fires []v1.RuleFires) policy.FireCounts {
	out := make(map[string]policy.Fires, len(fires))
	for _, f := range fires {
		var last time.Time
		if f.LastFiredAt != nil {
			last = f.LastFiredAt.Time
		}
		out[f.ID] = policy.Fires{Count: f.Fires, Last: last}
	}
	return func(key string) policy.Fires { return out[key] }
}

// CompletionHistory is a task's intents, in order, as Completion rules see them.
func CompletionHistory(intents []v1.ToolIntent) []policy.CompletedCall {
	ordered := append([]v1.ToolIntent(nil), intents...)
	sort.Slice(ordered, func(i, j int) bool { return IntentBefore(&ordered[i], &ordered[j]) })
	out := make([]policy.CompletedCall, 0, len(ordered))
	for i := range ordered {
		in := &ordered[i]
		c := policy.CompletedCall{Tool: in.Spec.Tool, ExitCode: -1, Turn: in.Spec.Turn, Index: in.Spec.Index}
		var input map[string]any
		if json.Unmarshal(in.Spec.Input.Raw, &input) == nil {
			c.Input = input
		}
		if d := in.Status.Decision; d != nil {
			c.Category, c.Action = d.Category, d.Action
		}
		if o := in.Status.Observation; o != nil {
			c.Outcome, c.Executed = o.Outcome, o.Executed
			if o.ExitCode != nil {
				c.ExitCode = int64(*o.ExitCode)
			}
		}
		out = append(out, c)
	}
	return out
}

// DecidedAt is when the intent's decision in force was made.
func DecidedAt(intent *v1.ToolIntent) time.Time {
	if c := meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionDecided); c != nil {
		return c.LastTransitionTime.Time
	}
	return intent.CreationTimestamp.Time
}
