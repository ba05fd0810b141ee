package controller

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// TestAuditLineCarriesCorrelationIDs checks the one structured line per pipeline step:
// it names the task, intent, decision (policy, rule, generation, fingerprint),
// approval, execution and job, so the steps of one call can be joined in a log store.
func TestAuditLineCarriesCorrelationIDs(t *testing.T) {
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	intent := &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "fix-t2-0"},
		Spec:       v1.ToolIntentSpec{TaskRef: v1.LocalObjectReference{Name: "fix"}, Turn: 2, Tool: v1.ToolEditFile, RequestedBy: "agent-alice"},
		Status: v1.ToolIntentStatus{
			Decision:      &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "project", 3, "ask-edits"), Fingerprint: "f00d"},
			ApprovalName:  "fix-t2-0",
			ExecutionName: "fix-t2-0",
			Observation:   &v1.Observation{Outcome: v1.OutcomeSucceeded, Executed: true},
		},
	}
	auditLine(log, toolintent.EventApprovalGranted, "approved by bob", intent, "decidedBy", "bob")
	if len(lines) != 1 {
		t.Fatalf("want one audit line, got %d: %v", len(lines), lines)
	}
	for _, kv := range []string{
		`"audit"=true`, `"step"="ApprovalGranted"`, `"decidedBy"="bob"`, `"namespace"="team-a"`, `"task"="fix"`, `"intent"="fix-t2-0"`,
		`"turn"=2`, `"tool"="edit_file"`, `"requestedBy"="agent-alice"`, `"action"="Ask"`,
		`"rule"="ToolPolicy/project/ask-edits"`, `"generation"=3`, `"fingerprint"="f00d"`,
		`"approval"="fix-t2-0"`, `"execution"="fix-t2-0"`, `"job"="fix-t2-0"`, `"outcome"="Succeeded"`, `"executed"=true`,
	} {
		if !strings.Contains(lines[0], kv) {
			t.Errorf("audit line lacks %s:\n%s", kv, lines[0])
		}
	}
}
