package admission

import (
	"testing"
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
