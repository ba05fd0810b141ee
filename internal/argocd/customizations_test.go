package argocd

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite config/argocd/argocd-cm.yaml from the .lua files")

func scriptsDir() string { return filepath.Join(testenv.RepoRoot(), "config", "argocd") }

// loadCustomizations reads config/argocd or fails the test.
func loadCustomizations(t *testing.T) *Customizations {
	t.Helper()
	c, err := Load(scriptsDir())
	if err != nil {
		t.Fatalf("loading config/argocd: %v", err)
	}
	return c
}

// The shipped argocd-cm fragment is exactly what the .lua files generate, and reading
// it back as YAML gives every script unchanged (so the nesting of the action entries
// is right too).
func TestConfigMapMatchesScripts(t *testing.T) {
	c := loadCustomizations(t)
	want := c.ConfigMap()
	path := filepath.Join(scriptsDir(), "argocd-cm.yaml")
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s differs from the .lua files; regenerate it with\n  go test ./internal/argocd -run TestConfigMapMatchesScripts -update", path)
	}

	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(got, &cm); err != nil {
		t.Fatalf("argocd-cm.yaml is not a ConfigMap: %v", err)
	}
	if cm.Name != "argocd-cm" || cm.Namespace != "argocd" {
		t.Errorf("the fragment patches %s/%s, want argocd/argocd-cm", cm.Namespace, cm.Name)
	}
	wantKeys := len(c.Health) + len(c.Actions)
	if len(cm.Data) != wantKeys {
		t.Errorf("argocd-cm.yaml has %d keys, want %d", len(cm.Data), wantKeys)
	}
	for _, kind := range []string{"AgentTask", "ToolIntent", "Approval", "ToolPolicy", "ClusterToolPolicy"} {
		script, ok := cm.Data[HealthKey(kind)]
		if !ok {
			t.Errorf("no %s", HealthKey(kind))
			continue
		}
		if script != c.Health[kind] {
			t.Errorf("%s does not read back as health/%s:\n%s", HealthKey(kind), healthScripts[kind], script)
		}
	}
	for _, kind := range []string{"AgentTask", "Approval"} {
		raw, ok := cm.Data[ActionsKey(kind)]
		if !ok {
			t.Errorf("no %s", ActionsKey(kind))
			continue
		}
		// The shape Argo CD reads (its ResourceActions type).
		var actions struct {
			Discovery   string `json:"discovery.lua"`
			Definitions []struct {
				Name   string `json:"name"`
				Script string `json:"action.lua"`
			} `json:"definitions"`
		}
		if err := yaml.UnmarshalStrict([]byte(raw), &actions); err != nil {
			t.Errorf("%s: %v", ActionsKey(kind), err)
			continue
		}
		set := c.Actions[kind]
		if actions.Discovery != set.Discovery {
			t.Errorf("%s: discovery.lua does not read back as actions/%s/discovery.lua", ActionsKey(kind), kind)
		}
		if len(actions.Definitions) != len(set.Definitions) {
			t.Errorf("%s: %d definitions, want %d", ActionsKey(kind), len(actions.Definitions), len(set.Definitions))
		}
		for _, d := range actions.Definitions {
			if d.Script != set.Definitions[d.Name] {
				t.Errorf("%s: action %q does not read back as actions/%s/%s.lua", ActionsKey(kind), d.Name, kind, d.Name)
			}
		}
	}
}

// The kustomize component patches with the generated fragment.
func TestKustomizationPatchesArgoCDConfigMap(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(scriptsDir(), "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Kind    string `json:"kind"`
		Patches []struct {
			Path string `json:"path"`
		} `json:"patches"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	if k.Kind != "Component" || len(k.Patches) != 1 || k.Patches[0].Path != "argocd-cm.yaml" {
		t.Errorf("kustomization.yaml should be a Component patching argocd-cm.yaml, got %+v", k)
	}
}

// Argo CD runs scripts without the string library; a script that used it would fail
// only in Argo CD. Running every script here already proves it, this names the cause.
func TestScriptsAvoidClosedLibraries(t *testing.T) {
	c := loadCustomizations(t)
	all := map[string]string{}
	for k, s := range c.Health {
		all["health/"+k] = s
	}
	for kind, set := range c.Actions {
		all["actions/"+kind+"/discovery"] = set.Discovery
		for n, s := range set.Definitions {
			all["actions/"+kind+"/"+n] = s
		}
	}
	for name, s := range all {
		for _, lib := range []string{"string.", ":sub(", ":find(", ":match(", ":format(", "math.", "io.", "os."} {
			if strings.Contains(s, lib) {
				t.Errorf("%s uses %q, which Argo CD does not open", name, lib)
			}
		}
	}
}
