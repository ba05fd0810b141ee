package admission

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
)

// TestResultReleaseFollowsTheApprovalRules: the Approval that releases a held
// output (a Result rule's Ask, pipeline.BuildResultApproval) is decided under the
// same admission rules as a call's: the call's requester never releases its own
// output, and an approver outside the rule's approvers is refused; a named
// approver releases it.
func TestResultReleaseFollowsTheApprovalRules(t *testing.T) {
	ns := setupNamespace(t)
	zero := int32(0)
	intent := &toolgatev1alpha1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "task-t0-0", UID: "intent-uid"},
		Spec:       toolgatev1alpha1.ToolIntentSpec{TaskRef: toolgatev1alpha1.LocalObjectReference{Name: "task"}, Tool: toolgatev1alpha1.ToolReadFile, RequestedBy: alice},
	}
	exec := &toolgatev1alpha1.Execution{ObjectMeta: metav1.ObjectMeta{Name: "task-t0-0", UID: "exec-uid"}, Status: toolgatev1alpha1.ExecutionStatus{Output: "REGION=eu\n"}}
	ref := toolgatev1alpha1.NewPolicyRuleReference(toolgatev1alpha1.PolicyRuleKindToolPolicy, "review", 1, "env-files")
	obs := &toolgatev1alpha1.Observation{Outcome: toolgatev1alpha1.OutcomeSucceeded, Executed: true, ExitCode: &zero, Summary: "[exit code: 0]\nREGION=eu\n",
		ResultCheck: &toolgatev1alpha1.ResultCheck{Action: toolgatev1alpha1.RuleAsk, PolicyRuleRef: &ref, Reason: "environment files may hold credentials"}}
	v := policy.ResultVerdict{Check: obs.ResultCheck, Summary: obs.Summary, Approvers: toolgatev1alpha1.Approvers{Users: []string{alice, bob}}}
	a := pipeline.BuildResultApproval(intent, exec, obs, v, json.RawMessage(`{"path":"app.env"}`), time.Hour, time.Now())
	if err := env.Client.Create(t.Context(), a); err != nil {
		t.Fatalf("creating the result's Approval: %v", err)
	}

	for _, decision := range []toolgatev1alpha1.ApprovalDecision{toolgatev1alpha1.DecisionApproved, toolgatev1alpha1.DecisionDenied} {
		err := decide(t.Context(), clients[alice], a, decision, alice)
		wantRefused(t, err, "you requested this intent, and the requester never votes: other people must decide.")
	}
	if err := decide(t.Context(), clients[carol], a, toolgatev1alpha1.DecisionApproved, carol); err == nil {
		t.Fatal("carol, who is not among the rule's approvers, released the output")
	}
	if err := decide(t.Context(), clients[bob], a, toolgatev1alpha1.DecisionApproved, bob); err != nil {
		t.Fatalf("bob's release was refused: %v", err)
	}
	if got := getApproval(t, a); len(got.Spec.Votes) != 1 || got.Spec.Votes[0].User != bob {
		t.Fatalf("votes %+v; want bob's alone", got.Spec.Votes)
	}
}
