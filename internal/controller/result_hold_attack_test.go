package controller

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
)

// askOnEnvFiles holds what reading an .env file printed until bob releases it.
func askOnEnvFiles() v1.PolicyRule {
	return v1.PolicyRule{Name: "env-files", When: v1.WhenResult, Action: v1.RuleAsk, Reason: "environment files may hold credentials",
		Approvers: v1.Approvers{Users: []string{"bob"}},
		Match:     v1.RuleMatch{Tools: []v1.ToolName{v1.ToolReadFile}, CEL: `intent.input.path.endsWith('.env')`}}
}

// heldOutput runs a read of prod.env in task name and waits until its output is
// held for a human.
func heldOutput(t *testing.T, name string) *pipelineEnv {
	p := startPipeline(t)
	p.task(name, v1.ModeEdit)
	p.policy("review", askOnEnvFiles())
	p.propose(name, 0, 0, v1.ToolReadFile, `{"path":"prod.env"}`)
	intent := name + "-t0-0"
	p.condition(intent, v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonExecutionCreated)
	p.runJob(intent, protocol.Result{ExitCode: 0}, "DB_HOST=prod-db.internal\n")
	p.condition(intent, v1.ConditionObserved, metav1.ConditionFalse, v1.ReasonResultAwaitingRelease)
	p.approval(intent + "-result")
	return p
}

// TestResultHeldSurvivesAPolicyChange: a held output is released by a human only.
// Whoever edits the policy while it is held (dropping the Ask rule, or turning it
// into an Audit) does not release it: as for a call's Approval whose deciding policy
// changed, the output is withheld.
func TestResultHeldSurvivesAPolicyChange(t *testing.T) {
	p := heldOutput(t, "hp")
	pol := &v1.ToolPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: "review"}, pol); err != nil {
		t.Fatal(err)
	}
	audit := askOnEnvFiles()
	audit.Action, audit.Approvers = v1.RuleAudit, v1.Approvers{}
	pol.Spec.Rules = []v1.PolicyRule{audit}
	if err := env.Client.Update(context.Background(), pol); err != nil {
		t.Fatal(err)
	}
	// Nothing watches policies for held outputs: the next pass of the intent
	// (here made by touching it) reads the policies as they are now.
	touch(t, &v1.ToolIntent{}, p.ns, "hp-t0-0")
	in := p.observed("hp-t0-0")
	mustNotContain(t, "summary", in.Status.Observation.Summary, "prod-db")
	mustContain(t, "summary", in.Status.Observation.Summary, "[output withheld]")
}

// TestResultHeldApprovalDeleted: deleting the Approval of a held output does not
// release it: the controller asks again, and the output stays held.
func TestResultHeldApprovalDeleted(t *testing.T) {
	p := heldOutput(t, "hd")
	old := p.approval("hd-t0-0-result")
	if err := env.Client.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	p.eventually("a new Approval", func() (bool, string) {
		a := &v1.Approval{}
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: "hd-t0-0-result"}, a)
		return err == nil && a.UID != old.UID, "waiting"
	})
	p.absent(p.reconciledNow("toolintent", p.getIntent("hd-t0-0")), "an observation without a human", func() bool {
		return p.getIntent("hd-t0-0").Status.Observation != nil
	})
}

// TestResultHeldTaskCancelled: cancelling the task while an output is held does not
// hand the output to anyone: the intent stays without an observation that carries it.
func TestResultHeldTaskCancelled(t *testing.T) {
	p := heldOutput(t, "hc")
	task := p.getTask("hc")
	if err := env.Client.Patch(context.Background(), task, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"lifecycle":"Cancelled"}}`))); err != nil {
		t.Fatal(err)
	}
	p.absent(p.reconciledNow("toolintent", p.getIntent("hc-t0-0")), "the held output in an observation", func() bool {
		obs := p.getIntent("hc-t0-0").Status.Observation
		return obs != nil && strings.Contains(obs.Summary, "prod-db")
	})
}

// TestResultHeldAcrossARestart: a controller started again while an output is held
// keeps holding it (the hold is in the intent's status and the Approval, nothing in
// memory), and releases it once bob approves.
func TestResultHeldAcrossARestart(t *testing.T) {
	p := heldOutput(t, "hr")
	p.stop()
	p = startPipelineIn(t, p.ns)
	p.absent(p.reconciledNow("toolintent", p.getIntent("hr-t0-0")), "an observation without a human", func() bool {
		return p.getIntent("hr-t0-0").Status.Observation != nil
	})
	p.decide("hr-t0-0-result", v1.DecisionApproved, "bob", "fine")
	in := p.observed("hr-t0-0")
	mustContain(t, "summary", in.Status.Observation.Summary, "DB_HOST=prod-db.internal")
}

// TestResultReleaseIsOfWhatTheApproverSaw: an approver releases the output as the
// Approval showed it. A Redact rule dropped while it is held (by whoever edits the
// policy) does not hand the model what the approver saw redacted.
func TestResultReleaseIsOfWhatTheApproverSaw(t *testing.T) {
	p := startPipeline(t)
	p.task("hs", v1.ModeEdit)
	redactHost := v1.PolicyRule{Name: "hosts", When: v1.WhenResult, Action: v1.RuleRedact,
		Redact: &v1.RedactSpec{Patterns: []string{`DB_HOST=(\S+)`}}}
	p.policy("review", askOnEnvFiles(), redactHost)
	p.propose("hs", 0, 0, v1.ToolReadFile, `{"path":"prod.env"}`)
	p.condition("hs-t0-0", v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonExecutionCreated)
	p.runJob("hs-t0-0", protocol.Result{ExitCode: 0}, "DB_HOST=prod-db.internal\n")
	p.condition("hs-t0-0", v1.ConditionObserved, metav1.ConditionFalse, v1.ReasonResultAwaitingRelease)
	shown := p.approval("hs-t0-0-result").Spec.Request.Result.Output
	mustContain(t, "approval output", shown, "DB_HOST=[REDACTED]")
	mustNotContain(t, "approval output", shown, "prod-db")

	pol := &v1.ToolPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: "review"}, pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.Rules = []v1.PolicyRule{askOnEnvFiles()}
	if err := env.Client.Update(context.Background(), pol); err != nil {
		t.Fatal(err)
	}
	p.decide("hs-t0-0-result", v1.DecisionApproved, "bob", "redacted, fine")
	in := p.observed("hs-t0-0")
	mustNotContain(t, "summary", in.Status.Observation.Summary, "prod-db")
}

// TestResultStopStopsARunningSibling: a call of the same turn that runs beside the
// one whose result a rule stopped the task on is stopped, not left to finish and
// hand its output over.
func TestResultStopStopsARunningSibling(t *testing.T) {
	p := startPipeline(t)
	p.task("ss", v1.ModeEdit)
	p.policy("tripwire", allowKubectlGet(),
		v1.PolicyRule{Name: "canary", When: v1.WhenResult, Action: v1.RuleStop, Reason: "a canary was read", Match: v1.RuleMatch{CEL: `result.output.contains('CANARY-7f3a')`}})
	p.proposeTurn("ss", 0, 0, 2, v1.ToolBash, `{"command":"cat notes"}`)
	p.proposeTurn("ss", 0, 1, 2, v1.ToolBash, `{"command":"cat more-notes"}`)
	p.condition("ss-t0-0", v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonExecutionCreated)
	p.condition("ss-t0-1", v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonExecutionCreated)
	p.runJob("ss-t0-0", protocol.Result{ExitCode: 0}, "CANARY-7f3a\n")
	p.finished("ss", v1.ConditionFailed, v1.ReasonPolicyStopped)
	in := p.observed("ss-t0-1")
	if in.Status.Observation.Outcome != v1.OutcomeAborted {
		t.Fatalf("the running sibling: %+v", in.Status.Observation)
	}
}
