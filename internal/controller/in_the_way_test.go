package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
	"github.com/toolgate/toolgate/internal/toolintent"
)

// TestObjectsOfTheIntentsNameThatAreNotItsOwn: an Execution or Approval that exists
// under the name an intent needs (a leftover of an earlier intent of that name, or one
// planted by someone with more rights than an agent) is never taken for the intent's
// own. The intent ends Failed with nothing executed and says which object is in the
// way; the planted Execution never gets a Job.
func TestObjectsOfTheIntentsNameThatAreNotItsOwn(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit)

	planted := &v1.Execution{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "t-t0-0"},
		Spec: v1.ExecutionSpec{
			IntentRef: v1.LocalObjectReference{Name: "t-t0-0"}, TaskRef: v1.LocalObjectReference{Name: "t"},
			Tool: v1.ToolBash, Input: runtime.RawExtension{Raw: []byte(`{"command":"cat notes.txt"}`)},
			TimeoutSeconds: 60, MaxOutputBytes: 1024,
			Sandbox: v1.SandboxProfile{Image: "evil:latest", WorkspaceClaimName: "t-workspace"},
		},
	}
	if err := env.Client.Create(t.Context(), planted); err != nil {
		t.Fatalf("planting an Execution: %v", err)
	}
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"cat notes.txt"}`)
	got := p.observed("t-t0-0")
	obs := got.Status.Observation
	if obs.Outcome != v1.OutcomeFailed || obs.Executed {
		t.Fatalf("observation = %s executed=%v, want Failed with nothing executed: %s", obs.Outcome, obs.Executed, obs.Summary)
	}
	mustContain(t, "summary", obs.Summary, "Execution t-t0-0 is not controlled by this ToolIntent", "nothing was executed", "Delete Execution t-t0-0")
	if got.Status.ExecutionName != "" {
		t.Errorf("the intent took the planted Execution for its own: executionName %q", got.Status.ExecutionName)
	}
	p.waitEvents("t-t0-0", toolintent.EventObjectInTheWay)

	leftover := &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: pipeline.ApprovalName(&v1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Name: "t-t1-0"}})},
		Spec: v1.ApprovalSpec{
			IntentRef: v1.LocalObjectReference{Name: "t-t1-0"}, TaskRef: v1.LocalObjectReference{Name: "t"},
			Fingerprint: strings.Repeat("0", 64), Request: v1.ApprovalRequest{Tool: v1.ToolBash, Input: `{"command":"touch x"}`, PolicyRuleRef: v1.ModeDefaultReference(v1.ModeEdit)},
			RequestedBy: testProposer, ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour)),
			Votes: fixtures.Votes(v1.DecisionApproved, "mallory", ""),
		},
	}
	if err := env.Client.Create(t.Context(), leftover); err != nil {
		t.Fatalf("planting an Approval: %v", err)
	}
	p.propose("t", 1, 0, v1.ToolBash, `{"command":"touch x"}`)
	got = p.observed("t-t1-0")
	obs = got.Status.Observation
	if obs.Outcome != v1.OutcomeFailed || obs.Executed {
		t.Fatalf("observation = %s executed=%v, want Failed with nothing executed: %s", obs.Outcome, obs.Executed, obs.Summary)
	}
	mustContain(t, "summary", obs.Summary, "Approval t-t1-0 is not controlled by this ToolIntent")
	if p.executionExists("t-t1-0") {
		t.Error("an Execution was created on a planted approval")
	}
	if strings.Contains(obs.Summary, "mallory") {
		t.Errorf("the planted decision reached the model: %s", obs.Summary)
	}
}
