package admission

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// Tests of config/admission/controller-owned.yaml. patcherUser holds a Role that lets
// it write these objects, so each refusal below comes from the policy, not from RBAC.

func TestOnlyTheControllerWritesStatus(t *testing.T) {
	observed := map[string]any{"status": map[string]any{"observedGeneration": 7}}
	cases := []struct {
		kind   string
		create func(t *testing.T, ns string) client.Object
	}{
		{"ToolIntent", func(t *testing.T, ns string) client.Object {
			obj := toolIntent(ns, "ls", agentUser)
			mustCreate(t, obj)
			return obj
		}},
		{"Approval", func(t *testing.T, ns string) client.Object {
			return createApproval(t, ns, requester, nil)
		}},
		{"Execution", func(t *testing.T, ns string) client.Object {
			obj := fixtures.Execution(ns, "ls")
			mustCreate(t, obj)
			return obj
		}},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			ns := setupNamespace(t)
			obj := tc.create(t, ns)

			err := clients[patcherUser].Status().Patch(t.Context(), obj.DeepCopyObject().(client.Object), mergePatchOf(t, observed))
			wantRefused(t, err, "only the toolgate controller writes the status of a "+tc.kind+", and pat is not the controller.")

			if err := clients[controllerUser].Status().Patch(t.Context(), obj.DeepCopyObject().(client.Object), mergePatchOf(t, observed)); err != nil {
				t.Fatalf("the controller's status write was refused: %v", err)
			}
		})
	}
}

func TestOnlyTheControllerCreatesApprovalsAndExecutions(t *testing.T) {
	ns := setupNamespace(t)

	wantRefused(t, clients[patcherUser].Create(t.Context(), fixtures.PendingApproval(ns, "by-hand", requester, nil)),
		"only the toolgate controller creates approvals, and pat is not the controller.")
	wantRefused(t, clients[patcherUser].Create(t.Context(), fixtures.Execution(ns, "by-hand")),
		"only the toolgate controller creates executions, and pat is not the controller.")

	if err := clients[controllerUser].Create(t.Context(), fixtures.PendingApproval(ns, "by-controller", requester, nil)); err != nil {
		t.Fatalf("the controller's Approval was refused: %v", err)
	}
	if err := clients[controllerUser].Create(t.Context(), fixtures.Execution(ns, "by-controller")); err != nil {
		t.Fatalf("the controller's Execution was refused: %v", err)
	}
}

func TestNewApprovalCarriesNoVotes(t *testing.T) {
	ns := setupNamespace(t)

	// Even the controller cannot create an approval that is already decided.
	a := fixtures.PendingApproval(ns, "pre-approved", requester, nil)
	a.Spec.Votes = []toolgatev1alpha1.ApprovalVote{{User: alice, Decision: toolgatev1alpha1.DecisionApproved}}
	wantRefused(t, clients[controllerUser].Create(t.Context(), a),
		"a new Approval must carry no votes: each approver votes afterwards, with an update of their own.")
}

// mustCreate creates obj as the admin.
func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T: %v", obj, err)
	}
}

// mergePatchOf encodes a JSON merge patch.
func mergePatchOf(t *testing.T, patch map[string]any) client.Patch {
	t.Helper()
	data, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	return client.RawPatch(types.MergePatchType, data)
}
