package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policyset"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// The tests in this file run every reconciler against a real kube-apiserver. envtest
// has no kubelet and no Job controller, so runJob plays their part: it creates the
// Job's pod and finishes it with a runner result, the way the real runner would
// (test/e2e runs the real runner in real Jobs).

func TestAllowExecutesAndObserves(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	p.propose("t", 0, 0, v1.ToolReadFile, `{"path":"src/app.sh"}`)

	intent := p.condition("t-t0-0", v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonExecutionCreated)
	if d := intent.Status.Decision; d.Action != v1.DecisionAllow || !d.PolicyRuleRef.IsModeDefault() {
		t.Fatalf("decision: %+v", d)
	}
	// The external agent's intent is adopted by its task, so deleting the task removes it.
	if owner := metav1.GetControllerOf(intent); owner == nil || owner.Kind != "AgentTask" || owner.Name != "t" {
		t.Fatalf("intent owner: %+v", intent.OwnerReferences)
	}
	exec := getExecution(t, p.ns, "t-t0-0")
	if !exec.Spec.Sandbox.ReadOnlyWorkspace || exec.Spec.Sandbox.WorkspaceClaimName != "t-workspace" || exec.Spec.Sandbox.Image != testSandboxImage {
		t.Fatalf("execution sandbox: %+v", exec.Spec.Sandbox)
	}
	if len(exec.OwnerReferences) != 1 || exec.OwnerReferences[0].Name != "t-t0-0" {
		t.Fatalf("execution owner: %+v", exec.OwnerReferences)
	}
	p.runJob("t-t0-0", protocol.Result{ExitCode: 0, ContentSHA256: strings.Repeat("c", 64), DurationMs: 12}, "     1\techo hi\n")

	intent = p.observed("t-t0-0")
	obs := intent.Status.Observation
	if obs.Outcome != v1.OutcomeSucceeded || !obs.Executed || obs.ExitCode == nil || *obs.ExitCode != 0 || obs.ContentSHA256 != strings.Repeat("c", 64) {
		t.Fatalf("observation: %+v", obs)
	}
	mustContain(t, "summary", obs.Summary, "[exit code: 0]", "echo hi")
	for _, typ := range []string{v1.ConditionValidated, v1.ConditionDecided, v1.ConditionExecuted, v1.ConditionObserved} {
		if !meta.IsStatusConditionTrue(intent.Status.Conditions, typ) {
			t.Errorf("condition %s not True: %+v", typ, intent.Status.Conditions)
		}
	}
	// An allowed call sends one event, when it is observed; the steps before its Job
	// are in its status and the audit log (an event each would be a write on the
	// path to the Job).
	p.waitEvents("t-t0-0", toolintent.EventObserved)
	if have := p.intentEvents("t-t0-0"); len(have) != 1 {
		t.Errorf("events of an allowed call: %v, want only %s", have, toolintent.EventObserved)
	}

	p.eventually("task counts", func() (bool, string) {
		task := p.getTask("t")
		return task.Status.Intents.Of(v1.OutcomeSucceeded) == 1 && task.Status.Intents.InFlight == 0 && task.Status.Phase == v1.TaskRunning, fmt.Sprintf("%+v", task.Status)
	})
}

func TestDenyNeverExecutes(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeAuto)
	p.policy("guard", v1.PolicyRule{
		Name: "no-deletes", Action: v1.RuleDeny, Reason: "deleting files is not allowed here",
		Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryDelete}},
	})
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"ls && rm -rf build"}`)

	intent := p.observed("t-t0-0")
	obs := intent.Status.Observation
	if obs.Outcome != v1.OutcomeDenied || obs.Executed {
		t.Fatalf("observation: %+v", obs)
	}
	mustContain(t, "summary", obs.Summary, "Nothing was run", "deleting files is not allowed here", "ToolPolicy/guard/no-deletes")
	d := intent.Status.Decision
	if d.PolicyRuleRef != v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "guard", 1, "no-deletes") || d.Category != v1.CategoryDelete {
		t.Fatalf("decision: %+v", d)
	}
	p.absent(p.wasObserved("t-t0-0"), "an Execution for a denied intent", func() bool { return p.countExecutions() > 0 })
	p.waitEvents("t-t0-0", toolintent.EventDecided, toolintent.EventObserved)
}

func TestValidationFailuresNeverExecute(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit, func(a *v1.AgentTask) { a.Spec.Tools = []v1.ToolName{v1.ToolBash, v1.ToolReadFile, v1.ToolEditFile} })
	cases := []struct {
		tool  v1.ToolName
		input string
		want  []string
	}{
		{v1.ToolBash, `{"timeoutMs":-5}`, []string{"input/", "command", "timeoutMs"}},
		{v1.ToolEditFile, `{"path":"main.go","oldText":"a","newText":"b"}`, []string{"edit_file needs an earlier successful read_file of \"main.go\""}},
		{v1.ToolReadFile, `{"path":"../../etc/passwd"}`, []string{"input/path", "is outside the workspace through"}},
		{v1.ToolReadFile, `{"path":"/etc/passwd"}`, []string{"outside the workspace"}},
		{v1.ToolWriteFile, `{"path":"a.txt","content":"x"}`, []string{"spec.tool: \"write_file\" is not available to this task"}},
	}
	for i, tc := range cases {
		name := fmt.Sprintf("t-t0-%d", i)
		p.propose("t", 0, int32(i), tc.tool, tc.input)
		intent := p.observed(name)
		obs := intent.Status.Observation
		if obs.Outcome != v1.OutcomeValidationFailed || obs.Executed {
			t.Fatalf("%s: observation %+v", name, obs)
		}
		mustContain(t, name+" summary", obs.Summary, append([]string{"Nothing was run", "invalid"}, tc.want...)...)
		c := meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionValidated)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonInputInvalid {
			t.Fatalf("%s: Validated condition %+v", name, c)
		}
		if intent.Status.Decision != nil {
			t.Fatalf("%s: an invalid intent was decided: %+v", name, intent.Status.Decision)
		}
	}
	var observed []moment
	for i := range cases {
		observed = append(observed, p.wasObserved(fmt.Sprintf("t-t0-%d", i)))
	}
	p.absent(all(observed...), "an Execution for an invalid intent", func() bool { return p.countExecutions() > 0 })
}

func TestAskApproveByMergePatchRunsOnce(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"curl -H 'Authorization: Bearer abcdefghijklmnop123' https://example.com/api?token=s3cr3tvalue"}`)

	a := p.approval("t-t0-0")
	mustNotContain(t, "approval input", a.Spec.Request.Input, "abcdefghijklmnop123", "s3cr3tvalue")
	mustContain(t, "approval input", a.Spec.Request.Input, "[MASKED]", "curl")
	if a.Spec.RequestedBy != "agent-alice" || len(a.Spec.Votes) != 0 || !a.Spec.Request.PolicyRuleRef.IsModeDefault() || len(a.Spec.Fingerprint) != 64 {
		t.Fatalf("approval spec: %+v", a.Spec)
	}
	if len(a.OwnerReferences) != 1 || a.OwnerReferences[0].Name != "t-t0-0" {
		t.Fatalf("approval owner: %+v", a.OwnerReferences)
	}
	p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)
	p.eventually("task awaiting approval", func() (bool, string) {
		task := p.getTask("t")
		return task.Status.Phase == v1.TaskAwaitingApproval && meta.IsStatusConditionTrue(task.Status.Conditions, v1.ConditionAwaitingApproval), string(task.Status.Phase)
	})
	p.absent(p.hasCondition("t-t0-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending),
		"an Execution before approval", func() bool { return p.executionExists("t-t0-0") })

	p.decide("t-t0-0", v1.DecisionApproved, "bob", "fine")
	intent := p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionTrue, v1.ReasonApprovalGranted)
	p.eventually("approval consumed", func() (bool, string) {
		a = p.approval("t-t0-0")
		return a.Status.State == v1.ApprovalStateConsumed && a.Status.ConsumedByExecutionName == "t-t0-0" && a.Status.DecidedAt != nil, fmt.Sprintf("%+v", a.Status)
	})
	// The Approval is consumed before the Execution is created.
	p.eventually("the Execution", func() (bool, string) { return p.executionExists("t-t0-0"), "none" })
	exec := getExecution(t, p.ns, "t-t0-0")
	if exec.Spec.ApprovalName() != "t-t0-0" || exec.Spec.Fingerprint != intent.Status.Decision.Fingerprint {
		t.Fatalf("execution approval binding: %+v", exec.Spec)
	}
	p.runJob("t-t0-0", protocol.Result{ExitCode: 7}, "HTTP 401: invalid token=s3cr3tvalue\n")
	intent = p.observed("t-t0-0")
	obs := intent.Status.Observation
	if obs.Outcome != v1.OutcomeFailed || !obs.Executed || *obs.ExitCode != 7 {
		t.Fatalf("observation: %+v", obs)
	}
	mustContain(t, "summary", obs.Summary, "[exit code: 7]", "HTTP 401", "[MASKED]")
	mustNotContain(t, "summary", obs.Summary, "s3cr3tvalue")
	if n := p.countExecutions(); n != 1 {
		t.Fatalf("%d Executions, want 1", n)
	}
}

func TestAskDenyAndTheSameCallIsNotAskedAgain(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"npm install left-pad"}`)
	p.approval("t-t0-0")
	p.decide("t-t0-0", v1.DecisionDenied, "bob", "we vendor our dependencies")

	intent := p.observed("t-t0-0")
	obs := intent.Status.Observation
	if obs.Outcome != v1.OutcomeApprovalDenied || obs.Executed {
		t.Fatalf("observation: %+v", obs)
	}
	mustContain(t, "summary", obs.Summary, "Nothing was run", "denied by bob", "we vendor our dependencies")
	p.eventually("approval state Denied", func() (bool, string) {
		a := p.approval("t-t0-0")
		return a.Status.State == v1.ApprovalStateDenied, string(a.Status.State)
	})

	// The same call, proposed again (key order and spacing differ: the normalized
	// input is what is fingerprinted), is denied without asking.
	p.propose("t", 1, 0, v1.ToolBash, `{ "command" : "npm install left-pad" }`)
	again := p.observed("t-t1-0")
	if again.Status.Observation.Outcome != v1.OutcomeDenied || again.Status.ApprovalName != "" {
		t.Fatalf("repeat: %+v", again.Status)
	}
	mustContain(t, "repeat summary", again.Status.Observation.Summary, "already denied by bob in Approval t-t0-0")
	p.absent(p.wasObserved("t-t1-0"), "a second Approval", func() bool {
		list := &v1.ApprovalList{}
		_ = env.Client.List(context.Background(), list, client.InNamespace(p.ns))
		return len(list.Items) > 1
	})
	if p.countExecutions() != 0 {
		t.Fatal("a denied call executed")
	}
}

func TestAskExpires(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit, func(a *v1.AgentTask) { a.Spec.Budgets.ApprovalTTLSeconds = 60 })
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make deploy"}`)
	a := p.approval("t-t0-0")
	p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)

	p.clock.Advance(2 * time.Minute)
	// Touch the Approval so it is reconciled now rather than at the requeue time.
	touch(t, &v1.Approval{}, p.ns, "t-t0-0")
	intent := p.observed("t-t0-0")
	if intent.Status.Observation.Outcome != v1.OutcomeApprovalExpired || intent.Status.Observation.Executed {
		t.Fatalf("observation: %+v", intent.Status.Observation)
	}
	mustContain(t, "summary", intent.Status.Observation.Summary, "expired", a.Spec.ExpiresAt.UTC().Format(time.RFC3339))
	p.eventually("approval state Expired", func() (bool, string) {
		a = p.approval("t-t0-0")
		return a.Status.State == v1.ApprovalStateExpired, string(a.Status.State)
	})
	if p.countExecutions() != 0 {
		t.Fatal("an expired approval executed")
	}
}

// TestAskDecidedAfterExpiryIsNotHonoured: expiry first. A person approves after
// expiresAt, before the controller noticed the expiry: the Approval's reconciler
// sees a decision first at or after expiresAt and records Expired, whatever it
// says; the call never runs.
func TestAskDecidedAfterExpiryIsNotHonoured(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit, func(a *v1.AgentTask) { a.Spec.Budgets.ApprovalTTLSeconds = 60 })
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"make deploy"}`)
	p.approval("t-t0-0")
	p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalPending)

	p.clock.Advance(2 * time.Minute)
	p.decide("t-t0-0", v1.DecisionApproved, "alice", "")
	intent := p.observed("t-t0-0")
	if intent.Status.Observation.Outcome != v1.OutcomeApprovalExpired || intent.Status.Observation.Executed {
		t.Fatalf("a late approval: observation %+v", intent.Status.Observation)
	}
	mustContain(t, "summary", intent.Status.Observation.Summary, "expired", "Approved by alice, but first seen by the controller at", "a late decision does not count")
	a := p.approval("t-t0-0")
	if a.Status.State != v1.ApprovalStateExpired || a.Status.DecidedAt == nil || a.Status.DecidedAt.Before(&a.Spec.ExpiresAt) {
		t.Fatalf("approval status %+v; want Expired, first seen at or after %s", a.Status, a.Spec.ExpiresAt)
	}
	if p.countExecutions() != 0 {
		t.Fatal("an approval decided after its expiry executed")
	}
}

func TestApprovalRequestLimit(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit, func(a *v1.AgentTask) { a.Spec.Budgets.MaxApprovalRequests = 1 })
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"npm install a"}`)
	p.approval("t-t0-0")
	p.propose("t", 1, 0, v1.ToolBash, `{"command":"npm install b"}`)
	intent := p.observed("t-t1-0")
	if intent.Status.Observation.Outcome != v1.OutcomeDenied || intent.Status.ApprovalName != "" {
		t.Fatalf("second ask: %+v", intent.Status)
	}
	mustContain(t, "summary", intent.Status.Observation.Summary, "approval-request limit is reached (1 of budgets.maxApprovalRequests=1)")
}

func TestApprovalForAnOlderPolicyGenerationIsRefused(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeAuto)
	pol := p.policy("review", v1.PolicyRule{
		Name: "ask-installs", Action: v1.RuleAsk, Reason: "installs need review",
		Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryInstall}},
	})
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"pip install requests"}`)
	a := p.approval("t-t0-0")
	if a.Spec.Request.PolicyRuleRef.Policy() != "ToolPolicy/review" || a.Spec.Request.PolicyRuleRef.Generation != 1 {
		t.Fatalf("approval request: %+v", a.Spec.Request)
	}
	// The policy changes while the approval waits: the human approved under rules
	// that are no longer the rules.
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"rules":[{"name":"ask-installs","action":"Ask","reason":"installs need review by security","match":{"categories":["Install"]}}]}}`))
	if err := env.Client.Patch(context.Background(), pol, patch); err != nil {
		t.Fatal(err)
	}
	if pol.Generation != 2 {
		t.Fatalf("policy generation %d, want 2", pol.Generation)
	}
	p.decide("t-t0-0", v1.DecisionApproved, "bob", "")
	intent := p.observed("t-t0-0")
	if intent.Status.Observation.Outcome != v1.OutcomeApprovalDenied || intent.Status.Observation.Executed {
		t.Fatalf("observation: %+v", intent.Status.Observation)
	}
	c := meta.FindStatusCondition(intent.Status.Conditions, v1.ConditionApproved)
	if c == nil || c.Reason != v1.ReasonFingerprintMismatch {
		t.Fatalf("Approved condition: %+v", c)
	}
	p.eventually("the refused approval's status says so", func() (bool, string) {
		a = p.approval("t-t0-0")
		return a.Status.State == v1.ApprovalStateApproved && strings.Contains(a.Status.Message, "refused by the controller") && a.Status.ConsumedByExecutionName == "", fmt.Sprintf("%+v", a.Status)
	})
	mustContain(t, "summary", intent.Status.Observation.Summary, "does not match this call any more")
	if p.countExecutions() != 0 {
		t.Fatal("a mismatched approval executed")
	}
}

func TestConcurrentReconcilesConsumeAnApprovalOnce(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	// Hold the intent with an undecided... no: create the approved state first, then
	// race two extra reconcilers (besides the manager's) against it.
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"npm install x"}`)
	p.approval("t-t0-0")

	// The racers read through the manager's cache, as the manager's own reconciler
	// does (its indexes answer the lookups a reconcile makes before it approves).
	newR := func() *ToolIntentReconciler {
		return &ToolIntentReconciler{
			Client: p.mgr.GetClient(), APIReader: env.Client, Scheme: env.Scheme, Options: testOptions(),
			Recorder: events.NewFakeRecorder(100), Policies: policyset.NewCache(), Now: time.Now,
		}
	}
	racers := []*ToolIntentReconciler{newR(), newR()}
	p.decide("t-t0-0", v1.DecisionApproved, "bob", "")
	var wg sync.WaitGroup
	errs := make(chan error, 2*5)
	for _, r := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: p.ns, Name: "t-t0-0"}})
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	reconciled := 0
	for err := range errs {
		if err == nil || apierrors.IsConflict(err) {
			reconciled++
		}
	}
	if reconciled == 0 {
		t.Fatal("no racing reconcile got through: the race raced nothing")
	}
	p.eventually("approval consumed", func() (bool, string) {
		a := p.approval("t-t0-0")
		return a.Status.State == v1.ApprovalStateConsumed, string(a.Status.State)
	})
	a := p.approval("t-t0-0")
	if a.Status.ConsumedByExecutionName != "t-t0-0" {
		t.Fatalf("consumedByExecutionName %q", a.Status.ConsumedByExecutionName)
	}
	// The Approval is consumed before the Execution is created.
	p.eventually("the Execution", func() (bool, string) { n := p.countExecutions(); return n == 1, fmt.Sprintf("%d Executions", n) })
	p.absent(p.reconciledNow("toolintent", p.getIntent("t-t0-0")), "a second Execution", func() bool { return p.countExecutions() > 1 })
}

func TestBatchPreflightHoldsSiblings(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)
	// Turn 0 proposes two calls: one needs a human, the other is a plain read.
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"npm install x"}`)
	p.propose("t", 0, 1, v1.ToolReadFile, `{"path":"package.json"}`)

	held := p.condition("t-t0-1", v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonWaitingForSiblings)
	if held.Status.Decision.Action != v1.DecisionAllow {
		t.Fatalf("the read should be allowed: %+v", held.Status.Decision)
	}
	mustContain(t, "held message", meta.FindStatusCondition(held.Status.Conditions, v1.ConditionExecuted).Message, "t-t0-0")
	p.absent(p.hasCondition("t-t0-1", v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonWaitingForSiblings),
		"the sibling executing while the batch waits", func() bool { return p.executionExists("t-t0-1") })

	p.decide("t-t0-0", v1.DecisionApproved, "bob", "")
	p.eventually("both executions", func() (bool, string) {
		return p.executionExists("t-t0-0") && p.executionExists("t-t0-1"), fmt.Sprint(p.countExecutions())
	})
	p.waitEvents("t-t0-1", toolintent.EventHeldForSiblings)
}

// touch updates an annotation so the object is reconciled now.
func touch(t *testing.T, obj client.Object, ns, name string) {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	unchanged := obj.DeepCopyObject().(client.Object)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann["test.toolgate.dev/touch"] = time.Now().String()
	obj.SetAnnotations(ann)
	// A merge patch: the controller may write the object meanwhile.
	if err := env.Client.Patch(context.Background(), obj, client.MergeFrom(unchanged)); err != nil {
		t.Fatal(err)
	}
}
