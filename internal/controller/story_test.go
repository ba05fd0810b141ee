package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// TestSeedStory is the story of the seed documents, end to end through the pipeline:
// run the test -> it fails -> read the code -> edit it with a human's approval -> run
// the test again -> it passes; then the owner marks the task done. Every intent's
// conditions, events and observation are checked.
func TestSeedStory(t *testing.T) {
	p := startPipeline(t)
	p.task("fix", v1.ModeEdit)
	p.policy("project",
		v1.PolicyRule{Name: "allow-tests", Action: v1.RuleAllow, Reason: "running the tests is safe",
			Match: v1.RuleMatch{Tools: []v1.ToolName{v1.ToolBash}, Categories: []v1.CommandCategory{v1.CategoryTest}}},
		v1.PolicyRule{Name: "ask-edits", Action: v1.RuleAsk, Reason: "code changes need review", Risk: v1.RiskMedium,
			Match:     v1.RuleMatch{Tools: []v1.ToolName{v1.ToolEditFile, v1.ToolWriteFile}},
			Approvers: v1.Approvers{Users: []string{"bob"}}},
		v1.PolicyRule{Name: "deny-destructive", Action: v1.RuleDeny, Reason: "destructive commands are never run",
			Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryDelete, v1.CategoryVCSDestructive}}},
	)

	// Turn 0: run the test; it fails.
	p.propose("fix", 0, 0, v1.ToolBash, `{"command":"go test ./...","description":"run the tests"}`)
	p.runJob("fix-t0-0", protocol.Result{ExitCode: 1, ErrorKind: protocol.KindExitCode, DurationMs: 900}, "--- FAIL: TestAdd\n    add_test.go:9: Add(2, 2) = 5, want 4\nFAIL\n")
	run1 := p.observed("fix-t0-0")
	expectDecision(t, run1, v1.DecisionAllow, "ToolPolicy/project/allow-tests")
	expectObservation(t, run1, v1.OutcomeFailed, true, 1, "[exit code: 1]", "Add(2, 2) = 5, want 4")
	expectConditions(t, run1, map[string]string{
		v1.ConditionValidated: "True/" + v1.ReasonInputValid, v1.ConditionDecided: "True/Allow",
		v1.ConditionExecuted: "True/" + v1.ReasonExecutionFinished, v1.ConditionObserved: "True/" + v1.ReasonObservationWritten,
	})
	p.waitEvents("fix-t0-0", toolintent.EventObserved)

	// Turn 1: read the code; the read is allowed by the mode and gives the baseline.
	const before = "sha256-of-add.go-before"
	p.propose("fix", 1, 0, v1.ToolReadFile, `{"path":"add.go"}`)
	p.runJob("fix-t1-0", protocol.Result{ExitCode: 0, ContentSHA256: before}, "     1\tpackage add\n     2\tfunc Add(a, b int) int { return a + b + 1 }\n")
	read := p.observed("fix-t1-0")
	expectDecision(t, read, v1.DecisionAllow, "ModeDefault/Edit")
	expectObservation(t, read, v1.OutcomeSucceeded, true, 0, "[exit code: 0]", "return a + b + 1")
	if read.Status.Observation.ContentSHA256 != before {
		t.Fatalf("read did not record the content hash: %+v", read.Status.Observation)
	}
	if !getExecution(t, p.ns, "fix-t1-0").Spec.Sandbox.ReadOnlyWorkspace {
		t.Error("read_file ran with a writable workspace")
	}

	// Turn 2: edit; the policy asks; the requester cannot be the decider (that is the
	// admission policy's job, tested in internal/admission); bob approves by merge patch.
	p.propose("fix", 2, 0, v1.ToolEditFile, `{"path":"add.go","oldText":"return a + b + 1","newText":"return a + b"}`)
	a := p.approval("fix-t2-0")
	if a.Spec.Request.PolicyRuleRef.Rule != "ask-edits" || a.Spec.Request.Risk != v1.RiskMedium || a.Spec.RequestedBy != "agent-alice" ||
		a.Spec.Approvers == nil || !slices.Equal(a.Spec.Approvers.Users, []string{"bob"}) {
		t.Fatalf("approval: %+v", a.Spec)
	}
	edit := p.condition("fix-t2-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)
	if edit.Status.Validation.BaselineSHA256 != before || edit.Status.Validation.BaselineIntentName != "fix-t1-0" {
		t.Fatalf("edit baseline: %+v", edit.Status.Validation)
	}
	p.eventually("task awaits approval", func() (bool, string) {
		return p.getTask("fix").Status.Phase == v1.TaskAwaitingApproval, string(p.getTask("fix").Status.Phase)
	})
	p.decide("fix-t2-0", v1.DecisionApproved, "bob", "looks right")
	p.eventually("edit execution", func() (bool, string) { return p.executionExists("fix-t2-0"), "" })
	if got := getExecution(t, p.ns, "fix-t2-0").Spec; got.BaselineSHA256 != before || got.ApprovalName() != "fix-t2-0" || got.Sandbox.ReadOnlyWorkspace {
		t.Fatalf("edit execution spec: %+v", got)
	}
	p.runJob("fix-t2-0", protocol.Result{ExitCode: 0, ContentSHA256: "sha256-after", LinesAdded: 1, LinesRemoved: 1}, "--- a/add.go\n+++ b/add.go\n-\treturn a + b + 1\n+\treturn a + b\n")
	edit = p.observed("fix-t2-0")
	expectDecision(t, edit, v1.DecisionAsk, "ToolPolicy/project/ask-edits")
	expectObservation(t, edit, v1.OutcomeSucceeded, true, 0, "[exit code: 0]", "+\treturn a + b")
	expectConditions(t, edit, map[string]string{
		v1.ConditionDecided: "True/Ask", v1.ConditionApproved: "True/" + v1.ReasonApprovalGranted,
		v1.ConditionExecuted: "True/" + v1.ReasonExecutionFinished, v1.ConditionObserved: "True/" + v1.ReasonObservationWritten,
	})
	p.waitEvents("fix-t2-0", toolintent.EventDecided, toolintent.EventApprovalRequested, toolintent.EventApprovalGranted, toolintent.EventObserved)

	// Turn 3: the agent tries a destructive shortcut; it is denied and nothing runs.
	p.propose("fix", 3, 0, v1.ToolBash, `{"command":"git reset --hard HEAD~1"}`)
	deny := p.observed("fix-t3-0")
	expectDecision(t, deny, v1.DecisionDeny, "ToolPolicy/project/deny-destructive")
	expectObservation(t, deny, v1.OutcomeDenied, false, -1, "Nothing was run", "destructive commands are never run")

	// Turn 4: run the test again; it passes.
	p.propose("fix", 4, 0, v1.ToolBash, `{"command":"go test ./..."}`)
	p.runJob("fix-t4-0", protocol.Result{ExitCode: 0}, "ok  \texample.com/add\t0.01s\n")
	pass := p.observed("fix-t4-0")
	expectObservation(t, pass, v1.OutcomeSucceeded, true, 0, "[exit code: 0]", "ok  \texample.com/add")

	// The owner marks the task done.
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"lifecycle":"Done"}}`))
	if err := env.Client.Patch(context.Background(), &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "fix"}}, patch); err != nil {
		t.Fatal(err)
	}
	p.eventually("task succeeded", func() (bool, string) {
		task := p.getTask("fix")
		c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionSucceeded)
		return task.Status.Phase == v1.TaskSucceeded && c != nil && c.Reason == v1.ReasonMarkedDone, fmt.Sprintf("%+v", task.Status)
	})
	task := p.getTask("fix")
	counts := task.Status.Intents
	if counts.Total != 5 || counts.InFlight != 0 || counts.Of(v1.OutcomeSucceeded) != 3 || counts.Of(v1.OutcomeFailed) != 1 || counts.Of(v1.OutcomeDenied) != 1 {
		t.Fatalf("task counts: %+v", counts)
	}
	if task.Status.Turn != 4 || task.Status.ApprovalRequests != 1 {
		t.Fatalf("task turn/approvals: %+v", task.Status)
	}

	// A finished task accepts no more intents.
	p.seenByController("fix", "Succeeded", func(got *v1.AgentTask) bool { return got.Status.Phase == v1.TaskSucceeded })
	p.propose("fix", 5, 0, v1.ToolBash, `{"command":"ls"}`)
	late := p.observed("fix-t5-0")
	expectObservation(t, late, v1.OutcomeValidationFailed, false, -1, "accepts no more intents: it Succeeded")
}

func TestRefusalBudgetEndsTheTask(t *testing.T) {
	p := startPipeline(t)
	p.task("stuck", v1.ModeReadOnly, func(a *v1.AgentTask) { a.Spec.Budgets.MaxConsecutiveRefusals = 2 })
	p.propose("stuck", 0, 0, v1.ToolBash, `{"command":"rm -rf /"}`)
	p.observed("stuck-t0-0")
	p.propose("stuck", 1, 0, v1.ToolBash, `{"command":"rm -rf /"}`)
	p.observed("stuck-t1-0")
	p.eventually("task failed", func() (bool, string) {
		task := p.getTask("stuck")
		c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1.ReasonRefusalBudgetExhausted && task.Status.Phase == v1.TaskFailed, fmt.Sprintf("%+v", task.Status.Conditions)
	})
}

func TestCancelEndsTheTask(t *testing.T) {
	p := startPipeline(t)
	p.task("c", v1.ModeEdit)
	// A call waiting for a human when the task is cancelled never runs.
	p.propose("c", 0, 0, v1.ToolBash, `{"command":"npm install x"}`)
	p.approval("c-t0-0")
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"lifecycle":"Cancelled"}}`))
	if err := env.Client.Patch(context.Background(), &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "c"}}, patch); err != nil {
		t.Fatal(err)
	}
	p.eventually("task cancelled", func() (bool, string) {
		task := p.getTask("c")
		c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed)
		return c != nil && c.Reason == v1.ReasonCancelled && task.Status.Phase == v1.TaskFailed, fmt.Sprintf("%+v", task.Status.Conditions)
	})
	expectObservation(t, p.observed("c-t0-0"), v1.OutcomeAborted, false, -1, "Nothing was run", "ended before this call ran")
	p.decide("c-t0-0", v1.DecisionApproved, "bob", "too late")
	p.absent(p.reconciledNow("toolintent", p.getIntent("c-t0-0")), "an Execution for a cancelled task", func() bool { return p.countExecutions() > 0 })
	p.propose("c", 1, 0, v1.ToolReadFile, `{"path":"a"}`)
	expectObservation(t, p.observed("c-t1-0"), v1.OutcomeValidationFailed, false, -1, "it Failed (Cancelled)")
}

func TestMissingExistingClaimKeepsTheTaskPending(t *testing.T) {
	p := startPipeline(t)
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "noclaim"},
		Spec:       v1.AgentTaskSpec{Goal: "x", Workspace: v1.WorkspaceSpec{ExistingClaim: "missing"}, Agent: v1.AgentSpec{External: externalAgent()}},
	}
	if err := env.Client.Create(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	p.eventually("Ready=False naming the claim", func() (bool, string) {
		got := p.getTask("noclaim")
		c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, `"missing"`) && got.Status.Phase == v1.TaskPending, fmt.Sprintf("%+v", got.Status)
	})
}

// expectDecision checks that intent was decided action by (its PolicyRuleReference,
// as String shows it).
func expectDecision(t *testing.T, intent *v1.ToolIntent, action v1.DecisionAction, by string) {
	t.Helper()
	d := intent.Status.Decision
	if d == nil || d.Action != action || d.PolicyRuleRef.String() != by || d.Fingerprint == "" {
		t.Fatalf("%s: decision %+v, want %s by %s", intent.Name, d, action, by)
	}
}

// expectObservation checks the observation; exitCode -1 means none.
func expectObservation(t *testing.T, intent *v1.ToolIntent, outcome v1.Outcome, executed bool, exitCode int32, summary ...string) {
	t.Helper()
	o := intent.Status.Observation
	if o == nil || o.Outcome != outcome || o.Executed != executed {
		t.Fatalf("%s: observation %+v, want %s executed=%t", intent.Name, o, outcome, executed)
	}
	if exitCode < 0 && o.ExitCode != nil || exitCode >= 0 && (o.ExitCode == nil || *o.ExitCode != exitCode) {
		t.Fatalf("%s: exit code %v, want %d", intent.Name, o.ExitCode, exitCode)
	}
	mustContain(t, intent.Name+" summary", o.Summary, summary...)
}

func expectConditions(t *testing.T, intent *v1.ToolIntent, want map[string]string) {
	t.Helper()
	for typ, sr := range want {
		c := meta.FindStatusCondition(intent.Status.Conditions, typ)
		if c == nil || string(c.Status)+"/"+c.Reason != sr {
			t.Errorf("%s: condition %s = %+v, want %s", intent.Name, typ, c, sr)
		}
	}
}
