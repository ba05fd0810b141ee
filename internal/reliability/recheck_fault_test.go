package reliability

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// TestAllowedCallDeniedWhenRecheckedDoesNotPanic holds an allowed call for its
// batch (a sibling waits for a person), adds an emergency Deny meanwhile, then
// lets the sibling be approved: the allowed call is decided again just before it
// runs and denied. The fuzzed intents found this under their policy churn.
//
// It panicked when the recheck of an allowed call (which has no Approval) passed
// its nil *Approval on as the event's related object: a non-nil interface holding
// a nil pointer, dereferenced by the event recorder after the status write, so the
// step's event and audit line were lost and the pass counted as failed.
func TestAllowedCallDeniedWhenRecheckedDoesNotPanic(t *testing.T) {
	ns := env.Namespace(t)
	r := record(t, ns)
	playKubelet(t, ns)
	startManager(t, context.Background(), env.Config, ns)
	newTask(t, ns, "recheck", v1.ModeEdit)
	if err := env.Client.Create(t.Context(), fixtures.ToolIntent(ns, "recheck", 0, 0, v1.ToolBash, `{"command":"ls"}`, testProposer)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(t.Context(), fixtures.ToolIntent(ns, "recheck", 0, 1, v1.ToolWriteFile, `{"path":"f","content":"x"}`, testProposer)); err != nil {
		t.Fatal(err)
	}
	waitApprovalPending(t, ns, "recheck-t0-1")
	err := env.Client.Create(t.Context(), &v1.ToolPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "emergency"},
		Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{{
			Name: "no-bash", Action: v1.RuleDeny, Reason: "bash is stopped for now",
			Match: v1.RuleMatch{Tools: []v1.ToolName{v1.ToolBash}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	decideWhenAsked(t, ns, "recheck-t0-1", v1.DecisionApproved)
	waitObserved(t, r, 2, time.Minute)
	wantNoViolations(t, r)
}

// waitApprovalPending waits until the Approval exists and is pending.
func waitApprovalPending(t *testing.T, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		a := &v1.Approval{}
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, a)
		if err == nil && a.Status.State == v1.ApprovalStatePending {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Approval %s never pending: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
