package admission

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Tests of config/admission/approval-decision.yaml. Unless a test says otherwise the
// approval was requested by "requester", a user who takes no part, and names no
// approvers, so the toolgate-approver role is all an approver needs.

const requester = "requester"

func TestApproverDecidesOnce(t *testing.T) {
	for _, decision := range []toolgatev1alpha1.ApprovalDecision{toolgatev1alpha1.DecisionApproved, toolgatev1alpha1.DecisionDenied} {
		t.Run(string(decision), func(t *testing.T) {
			ns := setupNamespace(t)
			a := createApproval(t, ns, requester, nil)

			if err := decide(t.Context(), clients[alice], a, decision, alice); err != nil {
				t.Fatalf("alice's decision was refused: %v", err)
			}
			got := getApproval(t, a)
			if got.Spec.Decision != decision || got.Spec.DecidedBy != alice {
				t.Fatalf("stored decision is %s by %q; want %s by alice", got.Spec.Decision, got.Spec.DecidedBy, decision)
			}

			// A second approver comes too late: the decision is final.
			err := decide(t.Context(), clients[bob], a, toolgatev1alpha1.DecisionApproved, bob)
			wantRefused(t, err, "this approval was already decided ("+string(decision)+") by alice and a decision is final")
		})
	}
}

func TestDecisionCannotFlip(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)
	if err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionApproved, alice); err != nil {
		t.Fatalf("alice's approval was refused: %v", err)
	}

	err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionDenied, alice)
	wantRefused(t, err, "this approval was already decided (Approved) by alice and a decision is final")

	// The comment belongs to the decision and is final with it.
	err = mergePatch(t.Context(), clients[alice], a, map[string]any{"spec": map[string]any{"comment": "on second thought"}})
	wantRefused(t, err, "this approval was already decided (Approved) by alice and a decision is final, including its comment")

	if got := getApproval(t, a); got.Spec.Decision != toolgatev1alpha1.DecisionApproved || got.Spec.Comment != "" {
		t.Fatalf("stored approval changed to %s with comment %q", got.Spec.Decision, got.Spec.Comment)
	}
}

func TestPendingApprovalCarriesNoDecider(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)

	// Naming oneself without deciding would make a later "already decided" message
	// lie, and a comment without a decision has nothing to explain.
	err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionPending, alice)
	wantRefused(t, err, "set spec.decision to Approved or Denied in the same update as spec.decidedBy and spec.comment")
}

func TestDecidedByMustBeTheCaller(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)

	err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionApproved, bob)
	wantRefused(t, err, "spec.decidedBy must be your user name, which is alice (it was bob).")
}

func TestRequesterCannotDecide(t *testing.T) {
	ns := setupNamespace(t)
	// alice is an approver, and she asked for this call herself.
	a := createApproval(t, ns, alice, nil)

	err := decide(t.Context(), clients[alice], a, toolgatev1alpha1.DecisionApproved, alice)
	wantRefused(t, err, "you requested this intent; another person must decide.")

	// Someone else may.
	if err := decide(t.Context(), clients[bob], a, toolgatev1alpha1.DecisionApproved, bob); err != nil {
		t.Fatalf("bob's approval was refused: %v", err)
	}
}

func TestControllerServiceAccountCannotDecide(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)

	// setupNamespace made the service account an approver, so only the rule that names
	// the controller stands in its way.
	err := decide(t.Context(), clients[controllerUser], a, toolgatev1alpha1.DecisionApproved, controllerUser)
	wantRefused(t, err, "the toolgate controller's service account can never decide an approval; a person must.")
}

func TestApproveVerbIsRequired(t *testing.T) {
	ns := setupNamespace(t)
	a := createApproval(t, ns, requester, nil)

	// patcherUser may patch approvals but does not hold approve.
	err := decide(t.Context(), clients[patcherUser], a, toolgatev1alpha1.DecisionApproved, patcherUser)
	wantRefused(t, err, "pat may not decide approvals in namespace "+ns+": that needs the approve verb on approvals.toolgate.dev (the toolgate-approver role).")
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
		if got := getApproval(t, a); got.Spec.DecidedBy != carol {
			t.Fatalf("decidedBy is %q; want carol", got.Spec.DecidedBy)
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
	} {
		t.Run(name, func(t *testing.T) {
			err := mergePatch(t.Context(), clients[alice], a, map[string]any{"spec": patch})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v; want the CRD to refuse the change as Invalid", err)
			}
			const want = "only spec.decision, spec.decidedBy and spec.comment of an Approval may change"
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
