package admission

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Tests of config/admission/approval-decision.yaml and of the CRD's rules on votes.
// Unless a test says otherwise the approval was requested by "requester", a user who
// takes no part, and names no approvers, so the toolgate-approver role is all an
// approver needs. Every user is a real one, authenticated by a client certificate.

const requester = "requester"

// quorumOfTwo names no one: any holder of the approve verb votes, and two must approve.
var quorumOfTwo = &toolgatev1alpha1.Approvers{Required: 2}

func TestApproverDecidesOnce(t *testing.T) {
	for _, decision := range []toolgatev1alpha1.ApprovalDecision{toolgatev1alpha1.DecisionApproved, toolgatev1alpha1.DecisionDenied} {
		t.Run(string(decision), func(t *testing.T) {
			ns := setupNamespace(t)
			a := createApproval(t, ns, requester, nil)

			if err := decide(t.Context(), clients[alice], a, decision, alice); err != nil {
				t.Fatalf("alice's vote was refused: %v", err)
			}
			got := getApproval(t, a)
			if len(got.Spec.Votes) != 1 || got.Spec.Votes[0].User != alice || got.Spec.Votes[0].Decision != decision {
				t.Fatalf("stored votes are %+v; want one, alice's %s", got.Spec.Votes, decision)
			}

			// A second approver comes too late: one vote decided it, and a decision is final.
			err := decide(t.Context(), clients[bob], a, toolgatev1alpha1.DecisionApproved, bob)
			if decision == toolgatev1alpha1.DecisionDenied {
				wantRefused(t, err, "this approval was already denied by alice; a decision is final, and no vote can be added.")
			} else {
				wantRefused(t, err, "this approval was already approved by alice (1 of 1 needed); a decision is final, and no vote can be added.")
			}
		})
	}
}

// TestQuorumTakesDistinctApprovers: with approvers.required 2, the first approval
// leaves the approval open for a second person, whose vote is taken; a third then
// comes too late.
func TestQuorumTakesDistinctApprovers(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, quorumOfTwo)
	for _, user := range []string{alice, carol} {
		if err := decide(t.Context(), clients[user], a, toolgatev1alpha1.DecisionApproved, user); err != nil {
			t.Fatalf("%s's approval was refused: %v", user, err)
		}
	}
	if got := getApproval(t, a); len(got.Spec.Votes) != 2 {
		t.Fatalf("stored votes are %+v; want alice's and carol's", got.Spec.Votes)
	}
	err := decide(t.Context(), clients[bob], a, toolgatev1alpha1.DecisionDenied, bob)
	wantRefused(t, err, "this approval was already approved by alice, carol (2 of 2 needed); a decision is final")
}

// TestADenyWhileVotingIsFinal: one approval of two, then a Deny: the Deny is taken
// (any approver's Deny denies), and nobody votes after it.
func TestADenyWhileVotingIsFinal(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, quorumOfTwo)
	if err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionApproved, alice); err != nil {
		t.Fatalf("alice's approval was refused: %v", err)
	}
	if err := decide(t.Context(), clients[bob], a, toolgatev1alpha1.DecisionDenied, bob); err != nil {
		t.Fatalf("bob's denial was refused: %v", err)
	}
	err := decide(t.Context(), clients[carol], a, toolgatev1alpha1.DecisionApproved, carol)
	wantRefused(t, err, "this approval was already denied by bob; a decision is final")
}

// TestOneVotePerPerson: alice approved an approval that needs two; a second vote of
// hers, the same or the other way, is refused, so she cannot make up the quorum
// alone or take her approval back.
func TestOneVotePerPerson(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, quorumOfTwo)
	if err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionApproved, alice); err != nil {
		t.Fatalf("alice's approval was refused: %v", err)
	}
	for _, decision := range []toolgatev1alpha1.ApprovalDecision{toolgatev1alpha1.DecisionApproved, toolgatev1alpha1.DecisionDenied} {
		err := vote(t.Context(), clients[alice], a, toolgatev1alpha1.ApprovalVote{User: alice, Decision: decision, Comment: "once more"})
		// The CRD refuses it (listType map keyed by user, and its rule), for every caller.
		const want = "spec.votes holds one vote per person: you already voted, and a vote is final"
		if !apierrors.IsInvalid(err) || !contains(err, want) {
			t.Fatalf("alice's second vote (%s): got %v; want it refused as Invalid with %q", decision, err, want)
		}
	}
	if got := getApproval(t, a); len(got.Spec.Votes) != 1 {
		t.Fatalf("stored votes are %+v; want alice's one", got.Spec.Votes)
	}
}

// TestVotesAreOnlyAppended: a cast vote is neither removed nor edited, by its voter
// or by another approver adding their own in the same update.
func TestVotesAreOnlyAppended(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, &toolgatev1alpha1.Approvers{Required: 3})
	if err := vote(t.Context(), clients[alice], a, toolgatev1alpha1.ApprovalVote{User: alice, Decision: toolgatev1alpha1.DecisionApproved, Comment: "fine"}); err != nil {
		t.Fatalf("alice's approval was refused: %v", err)
	}
	aliceVote := map[string]any{"user": alice, "decision": "Approved", "comment": "fine"}
	bobVote := map[string]any{"user": bob, "decision": "Approved"}
	for name, c := range map[string]struct {
		who string
		ops []map[string]any
	}{
		"bob removes alice's vote":              {bob, []map[string]any{{"op": "remove", "path": "/spec/votes/0"}}},
		"bob puts his vote in place of alice's": {bob, []map[string]any{{"op": "replace", "path": "/spec/votes/0", "value": bobVote}}},
		"bob edits alice's comment with his vote": {bob, []map[string]any{
			{"op": "replace", "path": "/spec/votes/0/comment", "value": "not fine"}, {"op": "add", "path": "/spec/votes/-", "value": bobVote}}},
		"alice turns her vote into a Deny":                {alice, []map[string]any{{"op": "replace", "path": "/spec/votes/0/decision", "value": "Denied"}}},
		"alice edits her comment":                         {alice, []map[string]any{{"op": "replace", "path": "/spec/votes/0/comment", "value": "fine, I guess"}}},
		"bob sends the list back without alice's comment": {bob, []map[string]any{{"op": "replace", "path": "/spec/votes", "value": []any{map[string]any{"user": alice, "decision": "Approved"}, bobVote}}}},
	} {
		t.Run(name, func(t *testing.T) {
			err := jsonPatch(t.Context(), clients[c.who], a, c.ops)
			wantRefused(t, err, "votes are only appended: alice's vote was changed or removed, and a vote, once cast, stays as it was.")
		})
	}
	// A vote put before the ones cast earlier would reorder the count (the first
	// Deny, approvedBy): refused, and so is a reordering that also appends.
	err := jsonPatch(t.Context(), clients[bob], a, []map[string]any{{"op": "add", "path": "/spec/votes/0", "value": bobVote}})
	wantRefused(t, err, "votes stay in the order they were cast: add yours at the end of spec.votes")
	err = mergePatch(t.Context(), clients[bob], a, map[string]any{"spec": map[string]any{"votes": []any{bobVote, aliceVote}}})
	wantRefused(t, err, "votes stay in the order they were cast")
	// A merge patch sends the whole list: it is held to the same rule.
	err = mergePatch(t.Context(), clients[bob], a, map[string]any{"spec": map[string]any{"votes": []any{bobVote}}})
	wantRefused(t, err, "votes are only appended: alice's vote was changed or removed")
	// Appending, with alice's vote as she cast it, is taken.
	err = mergePatch(t.Context(), clients[bob], a, map[string]any{"spec": map[string]any{"votes": []any{aliceVote, bobVote}}})
	if err != nil {
		t.Fatalf("bob's vote, appended with a merge patch, was refused: %v", err)
	}
	if got := getApproval(t, a); len(got.Spec.Votes) != 2 || got.Spec.Votes[0].Comment != "fine" || got.Spec.Votes[1].User != bob {
		t.Fatalf("stored votes are %+v; want alice's as cast, then bob's", got.Spec.Votes)
	}
}

// TestOneVotePerUpdate: two votes in one update are refused even when one is the
// caller's: the other person did not cast theirs.
func TestOneVotePerUpdate(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, quorumOfTwo)
	err := jsonPatch(t.Context(), clients[alice], a, []map[string]any{
		{"op": "add", "path": "/spec/votes/-", "value": map[string]any{"user": alice, "decision": "Approved"}},
		{"op": "add", "path": "/spec/votes/-", "value": map[string]any{"user": bob, "decision": "Approved"}},
	})
	wantRefused(t, err, "add exactly one vote, your own, per update; this update adds 2.")
}

func TestVoteMustBeTheCallers(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, quorumOfTwo)

	// alice casts bob's vote, to make up the quorum with her own later.
	err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionApproved, bob)
	wantRefused(t, err, "a vote must carry your own user name, which is alice (this one says bob).")
	if got := getApproval(t, a); len(got.Spec.Votes) != 0 {
		t.Fatalf("stored votes are %+v; want none", got.Spec.Votes)
	}
}

func TestRequesterCannotDecide(t *testing.T) {
	ns := setupNamespace(t)
	// alice is an approver, and she asked for this call herself.
	a := createApproval(t, ns, alice, quorumOfTwo)

	for _, decision := range []toolgatev1alpha1.ApprovalDecision{toolgatev1alpha1.DecisionApproved, toolgatev1alpha1.DecisionDenied} {
		err := decide(t.Context(), clients[alice], a, decision, alice)
		wantRefused(t, err, "you requested this intent, and the requester never votes: other people must decide.")
	}

	// Others may.
	for _, user := range []string{bob, carol} {
		if err := decide(t.Context(), clients[user], a, toolgatev1alpha1.DecisionApproved, user); err != nil {
			t.Fatalf("%s's approval was refused: %v", user, err)
		}
	}
}

// TestNoVoteOnceNotPending: the controller recorded the approval Expired; a vote
// now is refused, even though the votes alone decide nothing yet.
func TestNoVoteOnceNotPending(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)
	expired := getApproval(t, a)
	expired.Status.State = toolgatev1alpha1.ApprovalStateExpired
	if err := clients[controllerUser].Status().Update(t.Context(), expired); err != nil {
		t.Fatalf("the controller's status write was refused: %v", err)
	}
	err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionApproved, alice)
	wantRefused(t, err, "this approval is Expired, no longer Pending: there is nothing left to vote on.")
}

func TestControllerServiceAccountCannotDecide(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)

	// setupNamespace made the service account an approver, so only the rule that names
	// the controller stands in its way.
	err := decide(t.Context(), clients[controllerUser], a, toolgatev1alpha1.DecisionApproved, controllerUser)
	wantRefused(t, err, "the toolgate controller's service account can never vote on an approval; a person must.")
}

func TestApproveVerbIsRequired(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)

	// patcherUser may patch approvals but does not hold approve.
	err := decide(t.Context(), clients[patcherUser], a, toolgatev1alpha1.DecisionApproved, patcherUser)
	wantRefused(t, err, "pat may not vote on approvals in namespace "+ns+": that needs the approve verb on approvals.toolgate.dev (the toolgate-approver role).")
}

func TestAgentCannotApprove(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)

	// RBAC refuses first: toolgate-agent has nothing on approvals. (A user who can
	// patch approvals but lacks approve is TestApproveVerbIsRequired.)
	err := decide(t.Context(), clients[agentUser], a, toolgatev1alpha1.DecisionApproved, agentUser)
	wantRefused(t, err, `User "agent-bot" cannot patch resource "approvals"`)
}

func TestUserWithoutRoleCannotApprove(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)

	err := decide(t.Context(), clients[strangerUser], a, toolgatev1alpha1.DecisionApproved, strangerUser)
	wantRefused(t, err, `User "mallory" cannot patch resource "approvals"`)
}

func TestListedApprovers(t *testing.T) {
	approvers := &toolgatev1alpha1.Approvers{Users: []string{bob}, Groups: []string{sreGroup}}

	t.Run("an approver who is not listed is refused", func(t *testing.T) {
		ns := setupNamespace(t)
		a := createApproval(t, ns, requester, approvers)
		err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionApproved, alice)
		wantRefused(t, err, "alice is not one of this approval's approvers (users: [bob], groups: [sre]).")
	})
	t.Run("a listed user may decide", func(t *testing.T) {
		ns := setupNamespace(t)
		a := createApproval(t, ns, requester, approvers)
		if err := decide(t.Context(), clients[bob], a, toolgatev1alpha1.DecisionDenied, bob); err != nil {
			t.Fatalf("bob is listed, yet his decision was refused: %v", err)
		}
	})
	t.Run("a member of a listed group may decide", func(t *testing.T) {
		ns := setupNamespace(t)
		a := createApproval(t, ns, requester, &toolgatev1alpha1.Approvers{Groups: []string{sreGroup}})
		if err := decide(t.Context(), clients[carol], a, toolgatev1alpha1.DecisionApproved, carol); err != nil {
			t.Fatalf("carol is in group sre, yet her decision was refused: %v", err)
		}
		if got := getApproval(t, a); len(got.Spec.Votes) != 1 || got.Spec.Votes[0].User != carol {
			t.Fatalf("stored votes are %+v; want carol's", got.Spec.Votes)
		}
	})
}

func TestRequestFieldsCannotChange(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, &toolgatev1alpha1.Approvers{Users: []string{alice}})

	// This rule is the CRD's (x-kubernetes-validations on ApprovalSpec), not an
	// admission policy's: it holds for every caller, the controller included.
	for name, patch := range map[string]map[string]any{
		"request":     {"request": map[string]any{"tool": "bash", "input": `{"command":"ls"}`}},
		"fingerprint": {"fingerprint": "cd00000000000000000000000000000000000000000000000000000000000000"},
		"requestedBy": {"requestedBy": "someone-else"},
		"approvers":   {"approvers": map[string]any{"users": []string{alice, bob}}},
		"required":    {"approvers": map[string]any{"users": []string{alice}, "required": 1}},
	} {
		t.Run(name, func(t *testing.T) {
			err := mergePatch(t.Context(), clients[alice], a, map[string]any{"spec": patch})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v; want the CRD to refuse the change as Invalid", err)
			}
			const want = "only spec.votes of an Approval may change"
			if !contains(err, want) {
				t.Fatalf("refusal message is %q; want it to contain %q", err, want)
			}
		})
	}
}

func TestOnlyTheControllerChangesLabels(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)
	relabel := map[string]any{"metadata": map[string]any{"labels": map[string]any{"toolgate.dev/intent": "another"}}}

	wantRefused(t, mergePatch(t.Context(), clients[alice], a, relabel), "only the toolgate controller may change the labels of an Approval.")
	if err := mergePatch(t.Context(), clients[controllerUser], a, relabel); err != nil {
		t.Fatalf("the controller's relabelling was refused: %v", err)
	}
	// Annotations stay free: kubectl and people's tools write them.
	note := map[string]any{"metadata": map[string]any{"annotations": map[string]any{"example.com/ticket": "OPS-1"}}}
	if err := mergePatch(t.Context(), clients[alice], a, note); err != nil {
		t.Fatalf("alice's annotation was refused: %v", err)
	}
}
