package controller

import (
	"github.com/go-logr/logr"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// auditLine writes one structured audit log line for a pipeline step, with every
// correlation id known for the intent: task, intent, decision (policy, rule,
// generation, fingerprint), approval and its decider (passed in extra), execution.
// note is already masked.
func auditLine(log logr.Logger, step, note string, intent *v1.ToolIntent, extra ...any) {
	kv := []any{
		"audit", true,
		"step", step,
		"namespace", intent.Namespace,
		"task", intent.Spec.TaskRef.Name,
		"intent", intent.Name,
		"turn", intent.Spec.Turn,
		"tool", intent.Spec.Tool,
		"requestedBy", intent.Spec.RequestedBy,
	}
	if intent.Spec.Cancel {
		kv = append(kv, "cancelledBy", pipeline.CancelledBy(intent))
	}
	if d := intent.Status.Decision; d != nil {
		kv = append(kv, "action", d.Action, "rule", d.PolicyRuleRef.String(), "generation", d.PolicyRuleRef.Generation, "fingerprint", d.Fingerprint)
	}
	if intent.Status.ApprovalName != "" {
		kv = append(kv, "approval", intent.Status.ApprovalName)
	}
	if intent.Status.ExecutionName != "" {
		kv = append(kv, "execution", intent.Status.ExecutionName, "job", intent.Status.ExecutionName)
	}
	if o := intent.Status.Observation; o != nil {
		kv = append(kv, "outcome", o.Outcome, "executed", o.Executed)
	}
	log.Info(note, append(kv, extra...)...)
}
