package admission

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/testenv"
)

// TestControllerMadeSamplesAreRefusedToOthers: config/samples shows an object of
// every kind, those only the controller creates included, so that people can read
// one. Each sample of such a kind (a kind whose CREATE the controller-owned policy
// matches) is accepted from the controller's service account and refused to
// patcherUser, who holds the RBAC to create it: a sample copied and applied by hand
// must not run a tool or ask a human on anyone's behalf.
func TestControllerMadeSamplesAreRefusedToOthers(t *testing.T) {
	ns := setupNamespace(t)
	controllerOnly := controllerCreatedResources(t)
	samples, err := testenv.Samples()
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	for _, sample := range samples {
		u := sample.Object
		resource := strings.ToLower(u.GetKind()) + "s"
		if !controllerOnly[resource] {
			continue
		}
		checked[resource] = true
		u.SetNamespace(ns)
		wantRefused(t, clients[patcherUser].Create(t.Context(), u.DeepCopy(), client.DryRunAll),
			"only the toolgate controller creates "+resource+", and pat is not the controller.")
		if err := clients[controllerUser].Create(t.Context(), u.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("%s: the controller's %s %s was refused: %v", sample.File, u.GetKind(), u.GetName(), err)
		}
	}
	for resource := range controllerOnly {
		if !checked[resource] {
			t.Errorf("config/samples has no sample of %s, which only the controller creates", resource)
		}
	}
}

// controllerCreatedResources are the resources whose CREATE the controller-owned
// admission policy matches: only the controller makes them.
func controllerCreatedResources(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "admission", "controller-owned.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, doc := range strings.Split(string(data), "\n---") {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal([]byte(doc), &p); err != nil || p.Kind != "ValidatingAdmissionPolicy" || p.Spec.MatchConstraints == nil {
			continue
		}
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			if slices.Contains(r.Operations, admissionregistrationv1.Create) {
				for _, res := range r.Resources {
					out[res] = true
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the controller-owned policy matches the creation of no resource")
	}
	return out
}
