package argocd

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/testenv"
)

type sampleDoc struct {
	file string
	obj  *unstructured.Unstructured
	raw  []byte
}

// sampleDocs reads every YAML document under config/samples/gitops.
func sampleDocs(t *testing.T) (string, []sampleDoc) {
	t.Helper()
	root := filepath.Join(testenv.RepoRoot(), "config", "samples", "gitops")
	var docs []sampleDoc
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, doc := range strings.Split(string(b), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Errorf("%s: %v", rel, err)
				continue
			}
			docs = append(docs, sampleDoc{file: rel, obj: u, raw: []byte(doc)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no sample documents found")
	}
	return root, docs
}

// Every sample document is accepted by the API server with toolgate's CRDs (schema,
// defaults, CEL rules): namespaces are created for real so that the namespaced
// documents can be checked in them, everything else with a server-side dry run. The
// Argo CD Applications are skipped by kind, because Argo CD's CRD is not installed;
// instead their source paths must be folders of the sample repository. Policies must
// also compile with every example passing, or the controller would mark them not Ready.
func TestGitOpsSamplesValidate(t *testing.T) {
	root, docs := sampleDocs(t)
	ctx := context.Background()
	seen := map[string]int{}
	// Namespaces first, as Argo CD syncs them first.
	for _, d := range docs {
		if d.obj.GetKind() != "Namespace" {
			continue
		}
		ns := d.obj.DeepCopy()
		if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("%s: creating namespace %s: %v", d.file, ns.GetName(), err)
		}
		seen["Namespace"]++
	}
	for _, d := range docs {
		kind := d.obj.GetKind()
		switch {
		case kind == "Namespace":
			continue
		case kind == "Application" && d.obj.GetAPIVersion() == "argoproj.io/v1alpha1":
			// Argo CD's CRD is not installed here: check what can be checked.
			path, _, _ := unstructured.NestedString(d.obj.Object, "spec", "source", "path")
			if info, err := os.Stat(filepath.Join(root, path)); path == "" || err != nil || !info.IsDir() {
				t.Errorf("%s: Application %s syncs path %q, which is not a folder of the sample repository", d.file, d.obj.GetName(), path)
			}
			seen[kind]++
			continue
		}
		if err := env.Client.Create(ctx, d.obj.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("%s: %s %s is refused by the API server: %v", d.file, kind, d.obj.GetName(), err)
		}
		seen[kind]++
		if kind == "ToolPolicy" || kind == "ClusterToolPolicy" {
			var p struct {
				Spec v1.ToolPolicySpec `json:"spec"`
			}
			if err := yaml.Unmarshal(d.raw, &p); err != nil {
				t.Errorf("%s: %v", d.file, err)
				continue
			}
			if _, err := policy.Compile(kind, d.obj.GetName(), 1, p.Spec); err != nil {
				t.Errorf("%s: %s %s does not compile: %v", d.file, kind, d.obj.GetName(), err)
			}
		}
	}
	// The layout the docs describe is all there.
	for kind, want := range map[string]int{"Application": 2, "Namespace": 1, "ToolPolicy": 1, "ClusterToolPolicy": 1, "AgentTask": 2} {
		if seen[kind] != want {
			t.Errorf("found %d %s documents, want %d", seen[kind], kind, want)
		}
	}
}

// The sample tasks are one of each agent kind.
func TestGitOpsSampleTasksCoverBothAgents(t *testing.T) {
	_, docs := sampleDocs(t)
	agents := map[string]bool{}
	for _, d := range docs {
		if d.obj.GetKind() != "AgentTask" {
			continue
		}
		agent, _, _ := unstructured.NestedMap(d.obj.Object, "spec", "agent")
		for k := range agent {
			agents[k] = true
		}
	}
	if !agents["model"] || !agents["external"] {
		t.Errorf("sample tasks cover agents %v, want both model and external", agents)
	}
}
