package controller

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/tools"
)

// TestSamplesAreValid applies every sample in config/samples to the API server (dry
// run, as an admin, who counts as the controller), compiles every sample policy,
// examples included, and validates every sample intent's input against its tool's
// schema, so the samples people copy or read cannot rot. Every kind has a sample;
// those of the kinds only the controller creates are shown to read, and
// internal/admission's TestControllerMadeSamplesAreRefusedToOthers checks that
// nobody else can apply them.
func TestSamplesAreValid(t *testing.T) {
	ns := env.Namespace(t)
	samples, err := testenv.Samples()
	if err != nil {
		t.Fatal(err)
	}
	sampled := map[string]bool{}
	for _, sample := range samples {
		u, f, doc := sample.Object, sample.File, sample.Doc
		sampled[u.GetKind()] = true
		if u.GetKind() != "ClusterToolPolicy" {
			u.SetNamespace(ns)
		}
		if err := env.Client.Create(context.Background(), u, client.DryRunAll); err != nil {
			t.Errorf("%s: %s %s refused by the API server: %v", f, u.GetKind(), u.GetName(), err)
		}
		switch u.GetKind() {
		case "ToolPolicy", "ClusterToolPolicy":
			var p v1.ToolPolicy
			if err := yaml.Unmarshal(doc, &p); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			kind := policy.KindToolPolicy
			if u.GetKind() == "ClusterToolPolicy" {
				kind = policy.KindClusterToolPolicy
			}
			if _, err := policy.Compile(kind, p.Name, 1, p.Spec); err != nil {
				t.Errorf("%s: policy %s does not compile: %v", f, p.Name, err)
			}
		case "ToolIntent":
			var in v1.ToolIntent
			if err := yaml.Unmarshal(doc, &in); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if _, errs := tools.Validate(in.Spec.Tool, in.Spec.Input.Raw); len(errs) > 0 {
				t.Errorf("%s: intent %s's input fails its tool's schema: %v", f, in.Name, errs)
			}
		}
	}
	for _, crd := range crdKinds(t) {
		if !sampled[crd] {
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
