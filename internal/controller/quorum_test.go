package controller

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
)

// quorumPolicy asks two distinct people to approve make deploy-now.
func quorumPolicy(t *testing.T, p *pipelineEnv) {
	t.Helper()
	p.policy("two-eyes", v1.PolicyRule{
		Name: "ask-deploy", Action: v1.RuleAsk, Reason: "deploys need two people", Risk: v1.RiskHigh,
		Match:     v1.RuleMatch{Commands: []v1.CommandPattern{commandPattern(t, "make", "deploy-now")}},
		Approvers: v1.Approvers{Required: 2},
	})
}

// oneOfTwo is the moment the Approval's reconciler counted alice's approval: 1/2,
// still Pending.
func (p *pipelineEnv) oneOfTwo(name string) moment {
	return moment{name: "alice's approval counted, 1 of 2", passed: func() (bool, string) {
		a := p.getApproval(name)
		return a.Status.State == v1.ApprovalStatePending && a.Status.Tally == "1/2" && slices.Equal(a.Status.ApprovedBy, []string{"alice"}),
			fmt.Sprintf("%+v", a.Status)
	}}
}

// TestQuorumOfTwoRunsOnlyAfterTheSecondApproval: an approval that needs two
// approvers does not run its call on the first approval; the second runs it, and
// the intent says who approved.
func TestQuorumOfTwoRunsOnlyAfterTheSecondApproval(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	quorumPolicy(t, p)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make deploy-now"}`)
	if a := p.approval("t-t0-0"); a.Spec.Approvers.Quorum() != 2 || a.Status.Tally != "0/2" {
		t.Fatalf("the approval asks %d approvers with tally %q; want 2, 0/2: %+v", a.Spec.Approvers.Quorum(), a.Status.Tally, a.Spec.Approvers)
	}

	p.decide("t-t0-0", v1.DecisionApproved, "alice", "fine by me")
	p.absent(p.oneOfTwo("t-t0-0"), "an Execution on one approval of two", func() bool { return p.executionExists("t-t0-0") })
	p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)

	p.decide("t-t0-0", v1.DecisionApproved, "carol", "")
	intent := p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionTrue, v1.ReasonApprovalGranted)
	mustContain(t, "approved condition", meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionApproved).Message, "approved by alice, carol")
	p.eventually("approval consumed", func() (bool, string) {
		a := p.getApproval("t-t0-0")
		return a.Status.State == v1.ApprovalStateConsumed && a.Status.Tally == "2/2" && slices.Equal(a.Status.ApprovedBy, []string{"alice", "carol"}), fmt.Sprintf("%+v", a.Status)
	})
	p.runJob("t-t0-0", protocol.Result{ExitCode: 0}, "deployed\n")
	expectObservation(t, p.observed("t-t0-0"), v1.OutcomeSucceeded, true, 0, "deployed")
	if n := p.countExecutions(); n != 1 {
		t.Fatalf("%d Executions, want 1", n)
	}
}

// TestQuorumAnyDenyDenies: one approval of two, then a Deny: the call is denied
// with the denier's comment fed back, and never runs.
func TestQuorumAnyDenyDenies(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	quorumPolicy(t, p)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make deploy-now"}`)

	p.decide("t-t0-0", v1.DecisionApproved, "alice", "")
	p.absent(p.oneOfTwo("t-t0-0"), "an Execution on one approval of two", func() bool { return p.executionExists("t-t0-0") })
	p.decide("t-t0-0", v1.DecisionDenied, "bob", "not on a Friday")

	obs := p.observed("t-t0-0").Status.Observation
	if obs.Outcome != v1.OutcomeApprovalDenied || obs.Executed {
		t.Fatalf("observation: %+v", obs)
	}
	mustContain(t, "summary", obs.Summary, "denied by bob", "not on a Friday")
	a := p.getApproval("t-t0-0")
	if a.Status.State != v1.ApprovalStateDenied || a.Status.DeniedBy != "bob" || a.Status.Tally != "1/2" {
		t.Fatalf("approval status: %+v", a.Status)
	}
	if n := p.countExecutions(); n != 0 {
		t.Fatalf("%d Executions, want none", n)
	}
}
