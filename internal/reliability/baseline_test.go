package reliability

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// TestBaselineKeepsEveryPromise is the run every fault test starts from, without a
// fault: allowed calls run, asked calls are approved or denied by a person, denied
// calls do not run, and the checker finds nothing. It proves the harness (the
// kubelet played here, the recorder) before faults are added to it.
func TestBaselineKeepsEveryPromise(t *testing.T) {
	ns := env.Namespace(t)
	r := record(t, ns)
	playKubelet(t, ns)
	startManager(t, context.Background(), env.Config, ns)
	newTask(t, ns, "base", v1.ModeEdit)
	denyDeletes(t, ns)

	const calls = 12
	for i := range int32(calls) {
		input := `{"command":"ls"}` // allowed: read-only
		switch i % 3 {
		case 1:
			input = fmt.Sprintf(`{"command":"touch f%d"}`, i) // the edit mode asks
		case 2:
			input = `{"command":"rm -rf build"}` // denied by the policy
		}
		if err := env.Client.Create(t.Context(), fixtures.ToolIntent(ns, "base", i, 0, v1.ToolBash, input, testProposer)); err != nil {
			t.Fatal(err)
		}
	}
	// A person decides the asked ones: every other one approved.
	for i := int32(1); i < calls; i += 3 {
		decision := v1.DecisionApproved
		if i%2 == 0 {
			decision = v1.DecisionDenied
		}
		decideWhenAsked(t, ns, fmt.Sprintf("base-t%d-0", i), decision)
	}
	waitObserved(t, r, calls, time.Minute)
	wantNoViolations(t, r)
}

// decideWhenAsked waits for the intent's Approval and decides it as "bob".
func decideWhenAsked(t *testing.T, ns, name string, decision v1.ApprovalDecision) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		a := &v1.Approval{}
		err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, a)
		if err == nil && a.Status.State == v1.ApprovalStatePending {
			patch := client.MergeFrom(a.DeepCopy())
			a.Spec.Votes = fixtures.Votes(decision, "bob", "")
			if err := env.Client.Patch(t.Context(), a, patch); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Approval %s was never pending to decide: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
