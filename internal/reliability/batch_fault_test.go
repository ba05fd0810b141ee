package reliability

import (
	"context"
	"testing"
	"time"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// TestTwoApprovedCallsOfOneTurnBothRun asks two calls in one turn and approves
// both: each is held for its batch while the other waits for a person, and once
// both are approved both must run. The fuzzed intents found two such calls held
// for ever.
//
// It hung when an asked call, approved and held for its batch, still counted as
// waiting for a person (its approval not consumed yet): each of the two approved
// calls held the other back, and nothing woke them.
func TestTwoApprovedCallsOfOneTurnBothRun(t *testing.T) {
	ns := env.Namespace(t)
	r := record(t, ns)
	playKubelet(t, ns)
	startManager(t, context.Background(), env.Config, ns)
	newTask(t, ns, "pair", v1.ModeEdit)
	for i := range int32(2) {
		if err := env.Client.Create(t.Context(), fixtures.ToolIntent(ns, "pair", 0, i, v1.ToolWriteFile, `{"path":"f","content":"x"}`, testProposer)); err != nil {
			t.Fatal(err)
		}
	}
	// Both pending first, so that neither runs before the other is approved.
	waitApprovalPending(t, ns, "pair-t0-0")
	waitApprovalPending(t, ns, "pair-t0-1")
	decideWhenAsked(t, ns, "pair-t0-0", v1.DecisionApproved)
	decideWhenAsked(t, ns, "pair-t0-1", v1.DecisionApproved)
	waitObserved(t, r, 2, time.Minute)
	wantNoViolations(t, r)
}
