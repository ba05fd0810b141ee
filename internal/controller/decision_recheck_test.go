package controller

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// clusterPolicy creates a ClusterToolPolicy for the test and deletes it after: it is
// cluster-wide, so its rules match only the commands the test proposes.
func (p *pipelineEnv) clusterPolicy(name string, rules ...v1.PolicyRule) *v1.ClusterToolPolicy {
	p.t.Helper()
	pol := &v1.ClusterToolPolicy{ObjectMeta: metav1.ObjectMeta{Name: p.ns + "-" + name}, Spec: v1.ToolPolicySpec{Rules: rules}}
	if err := env.Client.Create(p.t.Context(), pol); err != nil {
		p.t.Fatalf("creating cluster policy: %v", err)
	}
	p.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pol) })
	return pol
}

func (p *pipelineEnv) getApproval(name string) *v1.Approval {
	p.t.Helper()
	a := &v1.Approval{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: name}, a); err != nil {
		p.t.Fatalf("getting approval %s: %v", name, err)
	}
	return a
}

// Hole 2: an approval covers where the call runs. The task's owner opens egress and
// switches the image after the approval was asked; the approved call runs in the
// sandbox the approver saw (the decision's record), not in the task as it is now.
// The task's new sandbox applies to calls decided after the change.
func TestApprovedCallRunsInTheDecidedSandbox(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make build-release"}`)
	a := p.approval("t-t0-0")
	p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)
	a = p.getApproval(a.Name)
	shown := a.Spec.Request.Sandbox
	if shown == nil || shown.TaskUID != string(p.getTask("t").UID) || shown.Profile.Image != testSandboxImage ||
		shown.Profile.WorkspaceClaimName != "t-workspace" || shown.Profile.Network.Mode != v1.NetworkNone {
		t.Fatalf("the approval does not show the sandbox the call runs in: %+v", shown)
	}
	intent := p.getIntent("t-t0-0")
	if d := intent.Status.Decision; d.Sandbox == nil || a.Spec.Fingerprint != d.Fingerprint {
		t.Fatalf("decision sandbox %+v, fingerprint %s, approval's %s", d.Sandbox, d.Fingerprint, a.Spec.Fingerprint)
	}

	// The owner widens the task while the approval waits.
	p.patchTaskSpec("t", map[string]any{"sandbox": map[string]any{
		"image":   "evil.example/exfiltrate:latest",
		"network": map[string]any{"mode": "AllowList", "egress": []any{map[string]any{"cidr": "0.0.0.0/0"}}},
	}})
	p.eventually("task changed", func() (bool, string) {
		got := p.getTask("t")
		return got.Spec.Sandbox.Network.Mode == v1.NetworkAllowList, string(got.Spec.Sandbox.Network.Mode)
	})
	p.decide("t-t0-0", v1.DecisionApproved, "bob", "")
	p.eventually("Execution t-t0-0", func() (bool, string) { return p.executionExists("t-t0-0"), "" })
	exec := getExecution(t, p.ns, "t-t0-0")
	if exec.Spec.Sandbox.Image != testSandboxImage || exec.Spec.Sandbox.Network.Mode != v1.NetworkNone || len(exec.Spec.Sandbox.Network.Egress) != 0 ||
		exec.Spec.Sandbox.WorkspaceClaimName != "t-workspace" {
		t.Fatalf("the approved call runs in the task's new sandbox, not the approved one: %+v", exec.Spec.Sandbox)
	}
	p.runJob("t-t0-0", protocol.Result{ExitCode: 0}, "built\n")
	expectObservation(t, p.observed("t-t0-0"), v1.OutcomeSucceeded, true, 0, "built")

	// A call decided after the change is decided, and asked, for the task as it is.
	p.propose("t", 1, 0, v1.ToolBash, `{"command":"make build-release"}`)
	later := p.approval("t-t1-0")
	p.eventually("second approval shows the new sandbox", func() (bool, string) {
		later = p.getApproval("t-t1-0")
		s := later.Spec.Request.Sandbox
		return s != nil && s.Profile.Image == "evil.example/exfiltrate:latest" && s.Profile.Network.Mode == v1.NetworkAllowList, fmt.Sprintf("%+v", s)
	})
	if later.Spec.Fingerprint == a.Spec.Fingerprint {
		t.Error("the same call in another sandbox has the same fingerprint")
	}
}

// Hole 2: a task deleted and created again under the same name is another task (by
// UID). An approval asked for the first one never runs the call in the second.
func TestRecreatedTaskDoesNotRunAnOldApproval(t *testing.T) {
	p := startPipeline(t)
	first := p.task("t", v1.ModeEdit)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make build-release"}`)
	p.approval("t-t0-0")
	p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)
	oldUID := p.getTask("t").UID

	if err := env.Client.Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	p.eventually("task gone", func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: "t"}, &v1.AgentTask{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// Another task of the same name, another owner's, with the workspace and egress
	// it wants. (No garbage collector runs here, so the old intent and its approval
	// are still there, as they are in a cluster while the collector catches up.)
	second := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "t"},
		Spec: v1.AgentTaskSpec{
			Goal: "something else", Mode: v1.ModeAuto,
			Workspace: v1.WorkspaceSpec{ExistingClaim: "someone-elses-workspace"},
			Sandbox:   v1.SandboxSpec{Network: v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "0.0.0.0/0"}}}},
			Agent:     v1.AgentSpec{External: externalAgent()},
		},
	}
	if err := env.Client.Create(t.Context(), second); err != nil {
		t.Fatal(err)
	}
	p.seenByController("t", "as the second task", func(got *v1.AgentTask) bool { return got.UID == second.UID })
	p.decide("t-t0-0", v1.DecisionApproved, "bob", "")

	intent := p.observed("t-t0-0")
	expectObservation(t, intent, v1.OutcomeAborted, false, -1, "deleted and created again", string(oldUID))
	p.absent(p.wasObserved("t-t0-0"), "an Execution for the old approval", func() bool { return p.executionExists("t-t0-0") })
	if n := p.countExecutions(); n != 0 {
		t.Fatalf("%d Executions", n)
	}
}

// Hole 3: an emergency ClusterToolPolicy Deny added while an approval waits stops
// the call when it is approved: nothing runs, and the observation names the policy.
func TestEmergencyDenyStopsAWaitingApproval(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make deploy-now"}`)
	p.approval("t-t0-0")
	p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)

	pol := p.clusterPolicy("freeze", v1.PolicyRule{
		Name: "change-freeze", Action: v1.RuleDeny, Reason: "change freeze: nothing deploys",
		Match: v1.RuleMatch{Commands: []v1.CommandPattern{commandPattern(t, "make", "deploy-now")}},
	})
	p.decide("t-t0-0", v1.DecisionApproved, "bob", "ship it")

	intent := p.observed("t-t0-0")
	expectObservation(t, intent, v1.OutcomeDenied, false, -1, "ClusterToolPolicy/"+pol.Name+"/change-freeze", "change freeze: nothing deploys")
	if d := intent.Status.Decision; d.Action != v1.DecisionDeny || d.PolicyRuleRef.Policy() != "ClusterToolPolicy/"+pol.Name ||
		len(intent.Status.SupersededDecisions) != 1 || intent.Status.SupersededDecisions[0].Action != v1.DecisionAsk {
		t.Errorf("decision %+v, superseded %+v", d, intent.Status.SupersededDecisions)
	}
	c := meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionDecided)
	if c == nil || c.Reason != v1.ReasonRedecided {
		t.Fatalf("Decided condition: %+v", c)
	}
	mustContain(t, "Decided condition", c.Message, "ClusterToolPolicy/"+pol.Name, "was Ask by ModeDefault/Edit")
	p.absent(p.wasObserved("t-t0-0"), "an Execution", func() bool { return p.executionExists("t-t0-0") })
	p.eventually("approval retired", func() (bool, string) {
		a := p.getApproval("t-t0-0")
		return a.Status.State == v1.ApprovalStateSuperseded, fmt.Sprintf("%+v", a.Status)
	})
	p.waitEvents("t-t0-0", toolintent.EventApprovalRequested, toolintent.EventRedecided, toolintent.EventObserved)
}

// Hole 3: the same while an Allow is held for a sibling of its turn that waits for a
// human: when the sibling is approved and the Allow is released, it is decided again
// and denied; the sibling, which the new policy does not match, runs.
func TestEmergencyDenyStopsAHeldAllow(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeAuto)
	// The turn says it has two calls, so the Allow is held for its sibling however
	// late the controller sees the second one.
	p.proposeTurn("t", 0, 0, 2, v1.ToolBash, `{"command":"go test ./..."}`)
	p.proposeTurn("t", 0, 1, 2, v1.ToolBash, `{"command":"curl https://example.com"}`)
	p.approval("t-t0-1")
	held := p.condition("t-t0-0", v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonWaitingForSiblings)
	expectDecision(t, held, v1.DecisionAllow, "ModeDefault/Auto")

	pol := p.clusterPolicy("no-tests", v1.PolicyRule{
		Name: "no-go-test", Action: v1.RuleDeny, Reason: "the test cluster is down",
		Match: v1.RuleMatch{Commands: []v1.CommandPattern{commandPattern(t, "go", "test")}},
	})
	p.decide("t-t0-1", v1.DecisionApproved, "bob", "")

	denied := p.observed("t-t0-0")
	expectObservation(t, denied, v1.OutcomeDenied, false, -1, "ClusterToolPolicy/"+pol.Name+"/no-go-test", "was Allow by ModeDefault/Auto")
	p.absent(p.wasObserved("t-t0-0"), "an Execution for the denied call", func() bool { return p.executionExists("t-t0-0") })
	p.eventually("the sibling runs", func() (bool, string) { return p.executionExists("t-t0-1"), "" })
}

// Hole 3: a rule that asks now, where the recorded Ask was the mode's, asks again: the
// approval given under the mode is retired and a new Approval (a name of its own)
// asks the rule's approvers; the call runs on that one.
func TestStricterAskAsksAgain(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make deploy-now"}`)
	p.approval("t-t0-0")
	p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)

	p.policy("deploys", v1.PolicyRule{
		Name: "ask-deploy", Action: v1.RuleAsk, Reason: "deploys need the release manager", Risk: v1.RiskHigh,
		Match:     v1.RuleMatch{Commands: []v1.CommandPattern{commandPattern(t, "make", "deploy-now")}},
		Approvers: v1.Approvers{Users: []string{"rita"}},
	})
	p.decide("t-t0-0", v1.DecisionApproved, "carol", "")

	again := p.approval("t-t0-0-ask-2")
	if again.Spec.Request.PolicyRuleRef.Rule != "ask-deploy" || again.Spec.Approvers == nil || len(again.Spec.Approvers.Users) != 1 || again.Spec.Approvers.Users[0] != "rita" {
		t.Fatalf("the second approval: %+v", again.Spec)
	}
	p.eventually("first approval retired", func() (bool, string) {
		a := p.getApproval("t-t0-0")
		return a.Status.State == v1.ApprovalStateSuperseded, fmt.Sprintf("%+v", a.Status)
	})
	mustContain(t, "retired approval", p.getApproval("t-t0-0").Status.Message, "ToolPolicy/deploys/ask-deploy", "t-t0-0-ask-2")
	// The intent names the new Approval in a write after the one that creates it:
	// the reconcile that would have run the call on the first approval wrote that it
	// waits for the second.
	p.absent(moment{name: "the intent waits on the second approval", passed: func() (bool, string) {
		intent := p.getIntent("t-t0-0")
		ok := intent.Status.ApprovalName == "t-t0-0-ask-2" && len(intent.Status.SupersededDecisions) == 1 && intent.Status.Decision.PolicyRuleRef.Rule == "ask-deploy" &&
			meta.IsStatusConditionFalse(intent.Status.Conditions, v1.ConditionApproved)
		return ok, fmt.Sprintf("approvalName %q, decision %+v, superseded %d", intent.Status.ApprovalName, intent.Status.Decision, len(intent.Status.SupersededDecisions))
	}}, "an Execution before the second approval", func() bool { return p.executionExists("t-t0-0") })

	p.decide("t-t0-0-ask-2", v1.DecisionApproved, "rita", "")
	p.eventually("Execution", func() (bool, string) { return p.executionExists("t-t0-0"), "" })
	if got := getExecution(t, p.ns, "t-t0-0").Spec.ApprovalName(); got != "t-t0-0-ask-2" {
		t.Fatalf("the Execution consumed %q", got)
	}
	p.runJob("t-t0-0", protocol.Result{ExitCode: 0}, "deployed\n")
	expectObservation(t, p.observed("t-t0-0"), v1.OutcomeSucceeded, true, 0, "deployed")
}

// A retired (Superseded) Approval is never used. The intent's reconcile retires it
// and then records the new decision; when that second write is lost (a conflict, a
// crash), the next pass finds the Approval retired and the intent not knowing why.
// Here the Approval is retired by hand while the policies are as they were: the call
// is decided again, not stricter, and still does not run on the retired approval.
func TestRetiredApprovalIsNeverUsed(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make deploy-now"}`)
	a := p.approval("t-t0-0")
	a.Status.State = v1.ApprovalStateSuperseded
	a.Status.Message = "not used: the call was decided again just before running, and asked again"
	if err := env.Client.Status().Update(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	p.decide("t-t0-0", v1.DecisionApproved, "carol", "")

	intent := p.observed("t-t0-0")
	expectObservation(t, intent, v1.OutcomeApprovalDenied, false, -1, "Approval t-t0-0 was retired", "Propose the call again")
	if p.executionExists("t-t0-0") {
		t.Fatal("a retired approval was used")
	}
}

// A task being deleted starts no call and adopts no intent. With orphan propagation the garbage
// collector takes the task's owner reference off its intents; adopting one again
// (with the deleted task's UID) would hand it back to be deleted with the task, and
// an orphaned call of a task deleted and created again would never reach the
// check that aborts it. (No garbage collector runs here: the orphan finalizer
// keeps the task in deletion while an unowned intent names it.)
func TestATaskBeingDeletedAdoptsNothing(t *testing.T) {
	p := startPipeline(t)
	task := p.task("t", v1.ModeEdit)
	// A call that waits for a human when the deletion starts.
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make deploy-now"}`)
	p.approval("t-t0-0")
	if err := env.Client.Delete(t.Context(), task, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Stand in for the collector: drop the orphan finalizer.
		got := &v1.AgentTask{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(task), got); err == nil {
			got.Finalizers = nil
			_ = env.Client.Update(context.Background(), got)
		}
	})
	p.eventually("task in deletion", func() (bool, string) {
		return !p.getTask("t").DeletionTimestamp.IsZero(), ""
	})
	// It never runs, approved or not: a task being deleted starts no call.
	waiting := p.observed("t-t0-0")
	expectObservation(t, waiting, v1.OutcomeAborted, false, -1, "AgentTask t ended before this call ran (it is being deleted)")
	p.decide("t-t0-0", v1.DecisionApproved, "carol", "")

	// One proposed now is refused, and not adopted.
	p.propose("t", 1, 0, v1.ToolBash, `{"command":"ls"}`)
	expectObservation(t, p.observed("t-t1-0"), v1.OutcomeValidationFailed, false, -1, `AgentTask "t" accepts no more intents: it is being deleted`)
	// An intent is adopted at the start of the reconcile that wrote its
	// observation; the late approval is seen by a reconcile of its own.
	p.absent(p.wasObserved("t-t1-0"), "the intent adopted by the task being deleted", func() bool {
		return metav1.GetControllerOf(p.getIntent("t-t1-0")) != nil
	})
	p.absent(all(p.wasObserved("t-t1-0"), p.reconciledNow("toolintent", p.getIntent("t-t0-0"))), "an Execution for a call of the task being deleted", func() bool {
		return p.executionExists("t-t0-0") || p.executionExists("t-t1-0")
	})
}
