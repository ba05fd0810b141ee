package controller

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/tools"
)

// TestSamplesAreValid applies every sample in config/samples to the API server (dry
// run), compiles every sample policy, examples included, and validates every sample
// intent's input against its tool's schema, so the samples people copy cannot rot.
// Every kind a person writes has a sample; the kinds without one are those only the
// controller creates (the controller-owned admission policy refuses anyone else).
func TestSamplesAreValid(t *testing.T) {
	ns := env.Namespace(t)
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "toolgate_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	sampled := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			sampled[u.GetKind()] = true
			if u.GetKind() != "ClusterToolPolicy" {
				u.SetNamespace(ns)
			}
			if err := env.Client.Create(context.Background(), u, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s refused by the API server: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
			switch u.GetKind() {
			case "ToolPolicy", "ClusterToolPolicy":
				var p v1.ToolPolicy
				if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				kind := policy.KindToolPolicy
				if u.GetKind() == "ClusterToolPolicy" {
					kind = policy.KindClusterToolPolicy
				}
				if _, err := policy.Compile(kind, p.Name, 1, p.Spec); err != nil {
					t.Errorf("%s: policy %s does not compile: %v", filepath.Base(f), p.Name, err)
				}
			case "ToolIntent":
				var in v1.ToolIntent
				if err := yaml.Unmarshal([]byte(doc), &in); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if _, errs := tools.Validate(in.Spec.Tool, in.Spec.Input.Raw); len(errs) > 0 {
					t.Errorf("%s: intent %s's input fails its tool's schema: %v", filepath.Base(f), in.Name, errs)
				}
			}
		}
	}
	controllerOnly := controllerCreatedKinds(t)
	for _, crd := range crdKinds(t) {
		switch {
		case controllerOnly[crd] && sampled[crd]:
			t.Errorf("config/samples has a %s, which only the controller may create", crd)
		case !controllerOnly[crd] && !sampled[crd]:
			t.Errorf("config/samples has no %s: add a toolgate_v1alpha1_*.yaml with one", crd)
		}
	}
}

// crdKinds are the kinds of the generated CRDs.
func crdKinds(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	var kinds []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		kinds = append(kinds, crd.Spec.Names.Kind)
	}
	return kinds
}

// controllerCreatedKinds are the kinds whose CREATE the controller-owned admission
// policy matches: only the controller makes them.
func controllerCreatedKinds(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "admission", "controller-owned.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, doc := range strings.Split(string(data), "\n---") {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal([]byte(doc), &p); err != nil || p.Kind != "ValidatingAdmissionPolicy" || p.Spec.MatchConstraints == nil {
			continue
		}
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			if !slices.Contains(r.Operations, admissionregistrationv1.Create) {
				continue
			}
			for _, res := range r.Resources {
				kind, ok := kindOfResource[res]
				if !ok {
					t.Fatalf("the controller-owned policy matches the creation of %s, a resource this test does not know", res)
				}
				kinds[kind] = true
			}
		}
	}
	if len(kinds) == 0 {
		t.Fatal("the controller-owned policy matches the creation of no kind")
	}
	return kinds
}

// kindOfResource names the kind of each toolgate resource.
var kindOfResource = map[string]string{
	"agenttasks": "AgentTask", "toolintents": "ToolIntent", "approvals": "Approval",
	"executions": "Execution", "toolpolicies": "ToolPolicy", "clustertoolpolicies": "ClusterToolPolicy",
}
