package v1alpha1_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// projectFile is the part of kubebuilder's PROJECT file (version 3) this test reads.
type projectFile struct {
	Version   string   `json:"version"`
	Domain    string   `json:"domain"`
	Repo      string   `json:"repo"`
	Layout    []string `json:"layout"`
	Resources []struct {
		API struct {
			CRDVersion string `json:"crdVersion"`
			Namespaced bool   `json:"namespaced"`
		} `json:"api"`
		Controller bool   `json:"controller"`
		Domain     string `json:"domain"`
		Group      string `json:"group"`
		Kind       string `json:"kind"`
		Path       string `json:"path"`
		Version    string `json:"version"`
	} `json:"resources"`
}

// The PROJECT file describes exactly the resources the CRDs define: each CRD's group,
// kind, version and scope is one resource of the file, and nothing else is.
func TestProjectFileDescribesTheCRDs(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "PROJECT"))
	if err != nil {
		t.Fatal(err)
	}
	var p projectFile
	if err := yaml.Unmarshal(raw, &p); err != nil {
		t.Fatalf("PROJECT: %v", err)
	}
	if p.Version != "3" || p.Repo != "github.com/toolgate/toolgate" || len(p.Layout) != 1 || p.Layout[0] != "go.kubebuilder.io/v4" {
		t.Fatalf("PROJECT: version %q, repo %q, layout %v", p.Version, p.Repo, p.Layout)
	}
	described := map[string]bool{}
	for _, r := range p.Resources {
		if r.Group+"."+r.Domain != v1.GroupVersion.Group || r.Version != v1.GroupVersion.Version || r.API.CRDVersion != "v1" || !r.Controller ||
			r.Path != "github.com/toolgate/toolgate/api/v1alpha1" {
			t.Errorf("PROJECT resource %s: group %s.%s, version %s, crdVersion %s, controller %v, path %s",
				r.Kind, r.Group, r.Domain, r.Version, r.API.CRDVersion, r.Controller, r.Path)
		}
		if described[r.Kind+scope(r.API.Namespaced)] {
			t.Errorf("PROJECT lists %s twice", r.Kind)
		}
		described[r.Kind+scope(r.API.Namespaced)] = true
	}

	defined := map[string]bool{}
	for _, crd := range generatedCRDs(t) {
		if crd.Spec.Group != v1.GroupVersion.Group {
			t.Errorf("%s: group %s", crd.Name, crd.Spec.Group)
		}
		defined[crd.Spec.Names.Kind+scope(crd.Spec.Scope == apiextensionsv1.NamespaceScoped)] = true
	}
	if got, want := keys(described), keys(defined); got != want {
		t.Fatalf("PROJECT describes %s; the CRDs define %s", got, want)
	}
}

func scope(namespaced bool) string {
	if namespaced {
		return " (namespaced)"
	}
	return " (cluster)"
}

func keys(m map[string]bool) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
