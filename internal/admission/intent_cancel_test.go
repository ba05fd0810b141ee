package admission

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Tests of config/admission/toolintent-cancel.yaml.

var cancelPatch = map[string]any{"spec": map[string]any{"cancel": true}}

// Only an intent's own requester (or the controller) cancels it: another agent of
// the namespace, who holds the same role and so the same patch verb, is refused, and
// a proposer may cancel but not relabel its intent.
func TestOnlyTheProposerCancelsItsCall(t *testing.T) {
	ns := setupNamespace(t)
	if err := grant(t.Context(), ns, roleNames["agent"], rbacv1.Subject{Kind: rbacv1.UserKind, Name: carol}); err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, ns, carol, nil, "patch", "toolintents")
	waitAllowed(t, ns, agentUser, nil, "patch", "toolintents")

	mine := toolIntent(ns, "mine", agentUser)
	if err := clients[agentUser].Create(t.Context(), mine); err != nil {
		t.Fatal(err)
	}
	// The policy is new in this API server: wait, with dry runs, until it answers.
	var last error
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = mergePatch(ctx, clients[carol], mine, cancelPatch, client.DryRunAll)
		return last != nil, nil
	}); err != nil {
		t.Fatalf("another agent's cancel was never refused (last answer: %v)", last)
	}
	wantRefused(t, mergePatch(t.Context(), clients[carol], mine, cancelPatch),
		"only the proposer of ToolIntent mine (agent-bot) may cancel it, and carol is not.")
	if got := getIntent(t, mine); got.Spec.Cancel {
		t.Fatal("another agent's refused cancel took effect")
	}

	// The proposer may not use its patch for anything but the cancel.
	wantRefused(t, mergePatch(t.Context(), clients[agentUser], mine, map[string]any{"metadata": map[string]any{"labels": map[string]any{"toolgate.dev/task": "other"}}}),
		"only the toolgate controller may change the labels or annotations of a ToolIntent; its proposer may only cancel it (spec.cancel).")
	// Nor rewrite who proposed it after the fact (the MCP session annotation), or do
	// it alongside the cancel.
	wantRefused(t, mergePatch(t.Context(), clients[agentUser], mine, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"toolgate.dev/mcp-session": "someone-elses"}}}),
		"only the toolgate controller may change the labels or annotations of a ToolIntent; its proposer may only cancel it (spec.cancel).")
	wantRefused(t, mergePatch(t.Context(), clients[agentUser], mine, map[string]any{"spec": map[string]any{"cancel": true}, "metadata": map[string]any{"annotations": map[string]any{"x": "y"}}}),
		"only the toolgate controller may change the labels or annotations of a ToolIntent; its proposer may only cancel it (spec.cancel).")
	if got := getIntent(t, mine); got.Spec.Cancel || len(got.Annotations) > 0 {
		t.Fatalf("a refused patch took effect: cancel %t, annotations %v", got.Spec.Cancel, got.Annotations)
	}

	// Nor may any agent (the proposer or another) point an intent at an owner that
	// does not exist, which the garbage collector would take as a reason to delete
	// it with its Approval and Execution, or hold it with a finalizer.
	ghostOwner := map[string]any{"metadata": map[string]any{"ownerReferences": []map[string]any{{
		"apiVersion": "toolgate.dev/v1alpha1", "kind": "AgentTask", "name": "ghost", "uid": "00000000-0000-0000-0000-000000000000", "controller": true,
	}}}}
	finalizer := map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/hold"}}}
	for _, who := range []string{carol, agentUser} {
		for name, patch := range map[string]map[string]any{"an owner reference": ghostOwner, "a finalizer": finalizer} {
			err := mergePatch(t.Context(), clients[who], mine, patch)
			if !contains(err, "only the toolgate controller and the garbage collector may change the owner references or finalizers of a ToolIntent") {
				t.Errorf("%s adding %s: %v; want it refused", who, name, err)
			}
		}
	}
	if got := getIntent(t, mine); len(got.OwnerReferences) > 0 || len(got.Finalizers) > 0 {
		t.Fatalf("a refused metadata patch took effect: owners %v, finalizers %v", got.OwnerReferences, got.Finalizers)
	}

	if err := mergePatch(t.Context(), clients[agentUser], mine, cancelPatch); err != nil {
		t.Fatalf("the proposer's cancel was refused: %v", err)
	}
	if got := getIntent(t, mine); !got.Spec.Cancel {
		t.Fatal("the proposer's cancel did not take")
	}

	// The controller (here as an admin, system:masters, as make run and envtest run
	// it) cancels for whoever proposed: a model task's intents are its own.
	theirs := toolIntent(ns, "theirs", alice)
	if err := clients[controllerUser].Create(t.Context(), theirs); err != nil {
		t.Fatal(err)
	}
	if err := mergePatch(t.Context(), env.Client, theirs, cancelPatch); err != nil {
		t.Fatalf("the controller's cancel was refused: %v", err)
	}
	// A user without the patch verb stays out by RBAC.
	wantRefused(t, mergePatch(t.Context(), clients[viewerUser], mine, cancelPatch), `User "victor" cannot patch resource "toolintents"`)
}

func getIntent(t *testing.T, in *toolgatev1alpha1.ToolIntent) *toolgatev1alpha1.ToolIntent {
	t.Helper()
	got := &toolgatev1alpha1.ToolIntent{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: in.Namespace, Name: in.Name}, got); err != nil {
		t.Fatal(err)
	}
	return got
}
