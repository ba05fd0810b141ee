package pipeline

import (
	"encoding/json"
	"fmt"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/policy"
)

// ResultOf is an executed call's result as Result rules see it (policy.Result):
// the observation made from the Execution (what the model would see) and the
// output the Execution kept. input is the call's normalized input.
func ResultOf(tool v1.ToolName, input json.RawMessage, exec *v1.Execution, obs *v1.Observation) policy.Result {
	res := policy.Result{Outcome: obs.Outcome, ExitCode: -1, Output: obs.Summary, Truncated: obs.Truncated}
	if obs.ExitCode != nil {
		res.ExitCode = int64(*obs.ExitCode)
	}
	if exec != nil {
		res.FullOutput = exec.Status.Output
	}
	if obs.Outcome == v1.OutcomeSucceeded && (tool == v1.ToolWriteFile || tool == v1.ToolEditFile) {
		var in struct {
			Path string `json:"path"`
		}
		if json.Unmarshal(input, &in) == nil && in.Path != "" {
			res.Files = []string{in.Path}
		}
	}
	return res
}

// ResultWithheld opens the summary of a call whose output a Replace rule (or a
// policy that could not be read) kept from the model.
const ResultWithheld = "[output withheld] The call ran, and a policy kept its output from you"

// ApplyResult records what the result rules did (policy.CheckResult) on the
// observation the model reads: the redacted summary; for a Replace, a summary
// that says the output was withheld, and the rule's instruction, which the agent
// loop gives the model as its own message after the turn's tool results, never as
// part of a tool result. The Execution keeps what ran and printed.
func ApplyResult(obs *v1.Observation, verdict policy.ResultVerdict) *v1.Observation {
	if verdict.Check == nil {
		return obs
	}
	out := obs.DeepCopy()
	out.ResultCheck = verdict.Check.DeepCopy()
	out.Summary = fitSummary(verdict.Summary)
	if verdict.Check.Action == v1.RuleReplace {
		head := "[exit code: none]"
		if obs.ExitCode != nil {
			head = fmt.Sprintf("[exit code: %d]", *obs.ExitCode)
		}
		why := "a policy in scope is not Ready, so the result rules could not be checked"
		if ref := verdict.Check.PolicyRuleRef; ref != nil {
			why = "rule " + ref.String() + " replaced it"
		}
		out.Summary = mask.Secrets(fmt.Sprintf("%s\n%s (%s); people can read it in the Execution. Do not run the call again to see it.\n", head, ResultWithheld, why))
		out.Instruction = verdict.Instruction
	}
	return out
}

// ResultStopped says whether the observation's result rules stopped the task.
func ResultStopped(obs *v1.Observation) bool {
	return obs != nil && obs.ResultCheck != nil && obs.ResultCheck.Action == v1.RuleStop
}
