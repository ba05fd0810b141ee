package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/executor"
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
// observation the model reads: the redacted summary; for a Replace or a Stop, a
// summary that says the output was withheld, and the rule's instruction, which the agent
// loop gives the model as its own message after the turn's tool results, never as
// part of a tool result. The Execution keeps what ran and printed.
func ApplyResult(obs *v1.Observation, verdict policy.ResultVerdict) *v1.Observation {
	if verdict.Check == nil {
		return obs
	}
	out := obs.DeepCopy()
	out.ResultCheck = verdict.Check.DeepCopy()
	out.Summary = fitSummary(verdict.Summary)
	if a := verdict.Check.Action; a == v1.RuleRedact || a == v1.RuleReplace || a == v1.RuleStop || verdict.Check.Redactions > 0 {
		// The hash of a file the model was not shown whole would tell the agent
		// what it was not shown: a short redacted value, guessed and checked.
		// (edit_file then has no baseline from this read.)
		out.ContentSHA256 = ""
	}
	// A Stop is stricter than a Replace: the output it stopped the task on never
	// reaches the model either (an MCP client gets the observation of the call).
	if a := verdict.Check.Action; a == v1.RuleReplace || a == v1.RuleStop {
		head := "[exit code: none]"
		if obs.ExitCode != nil {
			head = fmt.Sprintf("[exit code: %d]", *obs.ExitCode)
		}
		why := "a policy in scope is not Ready, so the result rules could not be checked"
		if ref := verdict.Check.PolicyRuleRef; ref != nil {
			why = "rule " + ref.String() + " replaced it"
			if verdict.Check.Action == v1.RuleStop {
				why = "rule " + ref.String() + " stopped the task on it"
			}
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

// resultApprovalSuffix names the Approval that releases an intent's output.
const resultApprovalSuffix = "-result"

// maxApprovalOutput bounds the output an Approval shows (the CRD allows 16 KiB).
const maxApprovalOutput = 16000

// ResultApprovalName is the deterministic name of the Approval that releases the
// intent's output (a Result rule's Ask): one per intent, so a repeated create is
// AlreadyExists.
func ResultApprovalName(intent *v1.ToolIntent) string {
	name := intent.Name
	if max := maxObjectName - len(resultApprovalSuffix); len(name) > max {
		name = strings.TrimRight(name[:max], "-.")
	}
	return name + resultApprovalSuffix
}

// ResultFingerprint binds a release to the output it releases: the intent, the
// Execution that ran it, the output it kept, the rule that asked and what the model
// gets once it is released (held: the summary after the Redact rules, as the
// Approval shows it). A human releases that text, never another one: a Redact rule
// dropped while the output is held does not hand the model what the approver saw
// redacted.
func ResultFingerprint(intent *v1.ToolIntent, exec *v1.Execution, held *v1.Observation) string {
	sum := sha256.New()
	for _, part := range []string{"toolgate.dev/result/v2", string(intent.UID), intent.Namespace, intent.Name, string(exec.UID), exec.Name, exec.Status.OutputSHA256, exec.Status.Output, held.ResultCheck.PolicyRuleRef.String(), held.Summary} {
		fmt.Fprintf(sum, "%d:%s\n", len(part), part)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// BuildResultApproval is the Approval a Result rule's Ask creates: the call, the
// output the model would see once released (after the redactions, secrets masked,
// cut), who ran it, who may release it and until when, bound to the output
// (ResultFingerprint). The requester is the call's: it never releases its own
// output (the admission policy on votes).
func BuildResultApproval(intent *v1.ToolIntent, exec *v1.Execution, obs *v1.Observation, v policy.ResultVerdict, normalized json.RawMessage, ttl time.Duration, now time.Time) *v1.Approval {
	ref := *obs.ResultCheck.PolicyRuleRef
	a := &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{Name: ResultApprovalName(intent), Namespace: intent.Namespace, Labels: ChildLabels(intent)},
		Spec: v1.ApprovalSpec{
			IntentRef:   v1.LocalObjectReference{Name: intent.Name},
			TaskRef:     intent.Spec.TaskRef,
			Fingerprint: ResultFingerprint(intent, exec, obs),
			Request: v1.ApprovalRequest{
				Tool:           intent.Spec.Tool,
				Input:          cutText(mask.Command(string(normalized)), maxApprovalInput),
				Risk:           v.Risk,
				PolicyRuleRef:  ref,
				Reason:         cutText(mask.Secrets(obs.ResultCheck.Reason), maxApprovalReason),
				ProposerReason: cutText(mask.Secrets(intent.Spec.Reason), maxApprovalReason),
				Result: &v1.ApprovalResult{
					ExecutionName: exec.Name, Outcome: obs.Outcome, ExitCode: obs.ExitCode,
					Output: approvalOutput(v.Summary),
				},
			},
			RequestedBy: intent.Spec.RequestedBy,
			ExpiresAt:   metav1.NewTime(now.Add(ttl)),
		},
	}
	if !v.Approvers.IsEmpty() {
		approvers := v.Approvers
		a.Spec.Approvers = &approvers
	}
	return a
}

// approvalOutput is the output an approver reads: masked, cut to its head and tail.
func approvalOutput(summary string) string {
	out, _ := executor.CutToStored(mask.Secrets(summary), maxApprovalOutput)
	return out
}

// ResultRelease is what an Approval with request.result means for the output it
// holds.
type ResultRelease int

const (
	// ReleaseWait: nobody released or refused it yet.
	ReleaseWait ResultRelease = iota
	// Released: approved, for this output: the model gets it.
	Released
	// ReleaseRefused: denied, expired, retired, or for another output: the model
	// gets a fixed refusal instead.
	ReleaseRefused
)

// JudgeRelease says what a result's Approval means for the output bound by
// fingerprint, and in words why, for the record.
func JudgeRelease(a *v1.Approval, fingerprint string) (ResultRelease, string) {
	if a.Spec.Request.Result == nil || a.Spec.Fingerprint != fingerprint {
		return ReleaseRefused, fmt.Sprintf("Approval %s does not release this output (it is for another call or output)", a.Name)
	}
	switch a.Status.State {
	case v1.ApprovalStateApproved:
		return Released, fmt.Sprintf("output released by %s (Approval %s)", strings.Join(a.Status.ApprovedBy, ", "), a.Name)
	case v1.ApprovalStateDenied:
		return ReleaseRefused, "output withheld: " + DeniedReason(a)
	case v1.ApprovalStateExpired:
		return ReleaseRefused, fmt.Sprintf("output withheld: nobody released it before Approval %s expired at %s", a.Name, a.Spec.ExpiresAt.UTC().Format(time.RFC3339))
	case v1.ApprovalStateSuperseded, v1.ApprovalStateConsumed:
		return ReleaseRefused, fmt.Sprintf("output withheld: Approval %s is %s", a.Name, a.Status.State)
	}
	return ReleaseWait, ""
}

// ResultWithheldByHuman is the fixed text the model gets for an output a human did
// not release: it never carries any of the output.
const ResultWithheldByHuman = "[output withheld] The call ran, and its output was held for a human to release; it was not released, so you do not get it. Do not run the call again to see it."

// ApplyRelease is the observation of a held output once its Approval decided:
// released, what the rules left of it (ApplyResult); refused, the fixed refusal.
// Either way the check records who decided.
func ApplyRelease(obs *v1.Observation, v policy.ResultVerdict, release ResultRelease, why string) *v1.Observation {
	out := ApplyResult(obs, v)
	out.ResultCheck.Effects = append(out.ResultCheck.Effects, clip.Bytes(mask.Secrets(why), 1000))
	if len(out.ResultCheck.Effects) > policy.MaxResultEffects {
		out.ResultCheck.Effects = out.ResultCheck.Effects[len(out.ResultCheck.Effects)-policy.MaxResultEffects:]
	}
	if release != Released {
		head := "[exit code: none]"
		if obs.ExitCode != nil {
			head = fmt.Sprintf("[exit code: %d]", *obs.ExitCode)
		}
		out.Summary = head + "\n" + ResultWithheldByHuman + "\n"
		out.Instruction = ""
		out.ContentSHA256 = ""
	}
	return out
}

// ResultAwaitsRelease says whether the intent ran and its output waits for a human
// (a Result rule's Ask).
func ResultAwaitsRelease(intent *v1.ToolIntent) bool {
	c := meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionObserved)
	return intent.Status.Observation == nil && c != nil && c.Reason == v1.ReasonResultAwaitingRelease
}
