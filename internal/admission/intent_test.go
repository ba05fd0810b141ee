package admission

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// Tests of config/admission/toolintent-requester.yaml.

func TestToolIntentRequestedByMustBeTheCaller(t *testing.T) {
	ns := setupNamespace(t)

	err := clients[agentUser].Create(t.Context(), toolIntent(ns, "spoofed", alice))
	wantRefused(t, err, "spec.requestedBy must be your user name, which is agent-bot (it was alice).")

	if err := clients[agentUser].Create(t.Context(), toolIntent(ns, "honest", agentUser)); err != nil {
		t.Fatalf("an intent requested by its creator was refused: %v", err)
	}
}

func TestControllerCreatesIntentsOnATasksBehalf(t *testing.T) {
	ns := setupNamespace(t)

	// For model-driven tasks the controller creates the intents, so it is exempt.
	if err := clients[controllerUser].Create(t.Context(), toolIntent(ns, "for-the-task", alice)); err != nil {
		t.Fatalf("the controller's intent was refused: %v", err)
	}
}

// A group in spec.requestedByGroups lets its members into a task that names it, so
// only a member may claim it.
func TestToolIntentClaimsOnlyTheCallersGroups(t *testing.T) {
	ns := setupNamespace(t)
	if err := grant(t.Context(), ns, roleNames["agent"], rbacv1.Subject{Kind: rbacv1.UserKind, Name: carol}); err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, ns, carol, []string{sreGroup}, "create", "toolintents")

	own := toolIntent(ns, "as-sre", carol)
	own.Spec.RequestedByGroups = []string{sreGroup, "system:authenticated"}
	if err := clients[carol].Create(t.Context(), own); err != nil {
		t.Fatalf("an intent claiming the creator's own groups was refused: %v", err)
	}

	borrowed := toolIntent(ns, "as-admins", carol)
	borrowed.Spec.RequestedByGroups = []string{sreGroup, "admins"}
	wantRefused(t, clients[carol].Create(t.Context(), borrowed),
		"spec.requestedByGroups: admins is not one of your groups (you are in sre, system:authenticated); claim only groups you are in, or leave the field out.")

	foreign := toolIntent(ns, "agent-as-sre", agentUser)
	foreign.Spec.RequestedByGroups = []string{sreGroup}
	wantRefused(t, clients[agentUser].Create(t.Context(), foreign), "spec.requestedByGroups: sre is not one of your groups")

	// The controller creates a model task's intents and claims no group; it is exempt
	// from this rule as from the requester rule.
	byController := toolIntent(ns, "by-controller", alice)
	byController.Spec.RequestedByGroups = []string{"anything"}
	if err := clients[controllerUser].Create(t.Context(), byController); err != nil {
		t.Fatalf("the controller's intent was refused: %v", err)
	}
}
