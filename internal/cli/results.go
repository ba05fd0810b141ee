package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/policyset"
	"github.com/toolgate/toolgate/internal/tools"
)

// CheckedResult is what the result rules (when: Result) do with one output.
type CheckedResult struct {
	// Check is what the rules did, as the observation would record it; nil when
	// no result rule matched.
	Check *v1.ResultCheck `json:"check,omitempty"`
	// Summary is the text the model would see.
	Summary string `json:"summary"`
	// Instruction is a Replace rule's registered instruction, given to the model
	// as its own message.
	Instruction string `json:"instruction,omitempty"`
}

// checkResult runs the result rules of loaded on an observation made from exec,
// as the controller does when it observes the call.
func checkResult(loaded policyset.Set, req policy.Request, exec *v1.Execution, now time.Time) CheckedResult {
	obs := pipeline.FromExecution(exec, now)
	v := policy.CheckResult(policy.ResultRequest{Call: req, Result: pipeline.ResultOf(req.Tool, req.Input, exec, obs)}, loaded.Cluster, loaded.Namespaced, loaded.BrokenResult)
	out := pipeline.ApplyResult(obs, v)
	return CheckedResult{Check: out.ResultCheck, Summary: out.Summary, Instruction: out.Instruction}
}

// outputExecution is an Execution that printed output and exited with exitCode, as
// the runner would record it (masked as ComposeOutput masks): what `policy check
// --result` checks the result rules on.
func outputExecution(output string, exitCode int32) *v1.Execution {
	exec := &v1.Execution{ObjectMeta: metav1.ObjectMeta{Name: "checked-call"}}
	exec.Status.Phase, exec.Status.ExitCode = v1.ExecutionSucceeded, &exitCode
	if exitCode != 0 {
		exec.Status.Phase, exec.Status.ErrorKind = v1.ExecutionFailed, v1.ErrorExitCode
	}
	exec.Status.Output = mask.Secrets(output)
	exec.Status.StdoutBytes = int64(len(output))
	return exec
}

// resultExitCode is policy check's exit code for a result: that of the decision it
// is as strict as (Ask 1, Replace 5 as Redirect, Stop 6); Redact and Allow are 0.
func resultExitCode(rc *v1.ResultCheck) int {
	if rc == nil {
		return checkAllow
	}
	switch rc.Action {
	case v1.RuleAsk:
		return checkAsk
	case v1.RuleReplace:
		return checkRedirect
	case v1.RuleStop:
		return checkStop
	}
	return checkAllow
}

// renderCheckedResult writes a result check as policy check and replay show it.
func renderCheckedResult(b *strings.Builder, r CheckedResult) {
	if r.Check == nil {
		b.WriteString("Result rules: none matched; the model sees the output as it is\n")
		return
	}
	fmt.Fprintf(b, "Result rules: %s\n", indentRest(resultCheckText(r.Check, r.Instruction), "  "))
	fmt.Fprintf(b, "The model sees:\n%s\n", indent(r.Summary, "  | "))
}

// ReplayResults re-runs today's result rules (or --policy's) on the recorded result
// of every replayed intent that ran: the output its Execution recorded, as the
// controller observed it. It fills each intent's RecordedResult and ReplayedResult
// and, when what the rules do differs, a change. An intent whose Execution is gone
// gets a note and no result replay. The fires recorded before each call count
// against a Replace rule's limits, as when it was observed.
func ReplayResults(task *v1.AgentTask, intents []v1.ToolIntent, executions []v1.Execution, policies policyset.Set, replayed []ReplayedIntent) {
	byName := map[string]*v1.ToolIntent{}
	for i := range intents {
		byName[intents[i].Name] = &intents[i]
	}
	execOf := map[string]*v1.Execution{}
	for i := range executions {
		execOf[executions[i].Name] = &executions[i]
	}
	sorted := append([]v1.ToolIntent(nil), intents...)
	slices.SortFunc(sorted, func(a, b v1.ToolIntent) int {
		if pipeline.IntentBefore(&a, &b) {
			return -1
		}
		if pipeline.IntentBefore(&b, &a) {
			return 1
		}
		return 0
	})
	for i := range replayed {
		r := &replayed[i]
		in := byName[r.Name]
		if in == nil || in.Status.Observation == nil || !in.Status.Observation.Executed || in.Status.ExecutionName == "" {
			continue
		}
		r.RecordedResult = in.Status.Observation.ResultCheck
		exec := execOf[in.Status.ExecutionName]
		if exec == nil || exec.Status.Background != nil {
			r.Notes = append(r.Notes, "the result rules are not replayed: Execution "+in.Status.ExecutionName+" is no longer kept, and the observation holds only what the rules left")
			continue
		}
		normalized, errs := tools.Validate(in.Spec.Tool, in.Spec.Input.Raw)
		if len(errs) > 0 {
			continue
		}
		at := time.Time{}
		if o := in.Status.Observation.ObservedAt; o != nil {
			at = o.Time
		}
		var earlier []v1.ToolIntent
		for j := range sorted {
			if pipeline.IntentBefore(&sorted[j], in) {
				earlier = append(earlier, sorted[j])
			}
		}
		req := policy.Request{
			Namespace: in.Namespace, Task: task.Name, Mode: task.Spec.Mode, Tool: in.Spec.Tool, Input: normalized,
			Fires: pipeline.FireCountsOf(pipeline.RuleFires(string(task.UID), earlier, nil)), Now: at,
		}
		now := checkResult(policies, req, exec, at)
		r.ReplayedResult = now.Check
		if was, is := resultKey(r.RecordedResult), resultKey(r.ReplayedResult); was != is {
			r.Changes = append(r.Changes, fmt.Sprintf("result: %s -> %s", was, is))
			r.Changed = true
		}
	}
}

// resultKey says what result rules did, for comparing a recorded check with a
// replayed one: the deciding action and rule, and every effect.
func resultKey(rc *v1.ResultCheck) string {
	if rc == nil || (rc.Action == v1.RuleAllow && len(rc.Effects) == 0) {
		return "Allow (no result rule acted)"
	}
	s := string(rc.Action)
	if rc.PolicyRuleRef != nil {
		s += " by " + rc.PolicyRuleRef.String()
	}
	if len(rc.Effects) > 0 {
		s += " [" + strings.Join(rc.Effects, "; ") + "]"
	}
	return s
}
