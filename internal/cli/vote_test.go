package cli

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// TestApproveShowsTheQuorum: an approval that needs two approvers stays open after
// the first, and approve says who voted and what is still needed; the second
// approval decides it.
func TestApproveShowsTheQuorum(t *testing.T) {
	ns := testNamespace(t)
	record(t, fixtures.PendingApproval(ns, "fix-tests-build", agentUser, &v1.Approvers{Required: 2}))

	code, out, errOut := kubectl(t, alice, ns, "", "approve", "fix-tests-build", "--yes")
	if want := "Approval fix-tests-build approved by alice: 1 of 2 approvals; voted: alice (Approved); 1 more approval(s) needed."; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("alice's approval: exit %d, stderr %q; want %q in\n%s", code, errOut, want, out)
	}
	code, out, errOut = kubectl(t, bob, ns, "", "approve", "fix-tests-build", "--yes")
	if want := "Votes:          1 of 2 approvals; voted: alice (Approved); 1 more approval(s) needed"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("bob's approval: exit %d, stderr %q; want %q in\n%s", code, errOut, want, out)
	}
	if want := "Approval fix-tests-build approved by bob: 2 of 2 approvals; voted: alice (Approved), bob (Approved); approved."; !strings.Contains(out, want) {
		t.Fatalf("bob's approval: want %q in\n%s", want, out)
	}
}

// TestVoteAddsToTheVotesAsStored: bob's vote lands after alice read the approval;
// her vote is not written over the list she read (the resourceVersion test fails)
// but added, after reading it again, to the votes as stored.
func TestVoteAddsToTheVotesAsStored(t *testing.T) {
	ns := testNamespace(t)
	record(t, fixtures.PendingApproval(ns, "fix-tests-build", agentUser, &v1.Approvers{Required: 3}))
	ctx := t.Context()
	key := client.ObjectKey{Namespace: ns, Name: "fix-tests-build"}

	readByAlice := &v1.Approval{}
	if err := userClients[alice].Get(ctx, key, readByAlice); err != nil {
		t.Fatal(err)
	}
	readByBob := readByAlice.DeepCopy()
	if err := Vote(ctx, userClients[bob], readByBob, bob, v1.DecisionApproved, "first"); err != nil {
		t.Fatalf("bob's vote: %v", err)
	}
	if err := Vote(ctx, userClients[alice], readByAlice, alice, v1.DecisionApproved, "second"); err != nil {
		t.Fatalf("alice's vote on what she read before bob's: %v", err)
	}
	got := &v1.Approval{}
	if err := env.Client.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Votes) != 2 || got.Spec.Votes[0].User != bob || got.Spec.Votes[1].User != alice {
		t.Fatalf("stored votes %+v; want bob's, then alice's", got.Spec.Votes)
	}
	// A second vote of hers is stopped before it reaches the server, and says why.
	err := Vote(ctx, userClients[alice], got, alice, v1.DecisionDenied, "")
	if want := "you (alice) already voted Approved on Approval fix-tests-build; each person votes once and a vote is final"; err == nil || err.Error() != want {
		t.Fatalf("alice's second vote: %v; want %q", err, want)
	}
}
