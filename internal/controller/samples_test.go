package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/testenv"
)

// TestSamplesAreValid applies every sample in config/samples to the API server (dry
// run) and compiles every sample policy, examples included, so the samples people copy
// cannot rot.
func TestSamplesAreValid(t *testing.T) {
	ns := env.Namespace(t)
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "toolgate_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
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
			}
		}
	}
}
