package argocd

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Group is the API group of toolgate's kinds, as argocd-cm keys spell it.
const Group = "toolgate.dev"

// healthScripts maps each kind with a health check to its file under health/. The two
// policy kinds share one script: they have the same status.
var healthScripts = map[string]string{
	"AgentTask":         "AgentTask.lua",
	"ToolIntent":        "ToolIntent.lua",
	"Approval":          "Approval.lua",
	"ToolPolicy":        "ToolPolicy.lua",
	"ClusterToolPolicy": "ToolPolicy.lua",
}

// actionKinds are the kinds with actions, each a folder under actions/ holding
// discovery.lua and one NAME.lua per action.
var actionKinds = []string{"AgentTask", "Approval"}

// Customizations are toolgate's Argo CD resource customizations.
type Customizations struct {
	// Health maps a kind to its health script.
	Health map[string]string
	// Actions maps a kind to its actions.
	Actions map[string]ActionSet
}

// ActionSet is a kind's action discovery script and action scripts.
type ActionSet struct {
	// Discovery says which actions an object offers.
	Discovery string
	// Definitions maps an action's name to its script.
	Definitions map[string]string
}

// Load reads the customizations from dir (config/argocd).
func Load(dir string) (*Customizations, error) {
	c := &Customizations{Health: map[string]string{}, Actions: map[string]ActionSet{}}
	for kind, file := range healthScripts {
		b, err := os.ReadFile(filepath.Join(dir, "health", file))
		if err != nil {
			return nil, fmt.Errorf("health check of %s: %w", kind, err)
		}
		c.Health[kind] = string(b)
	}
	for _, kind := range actionKinds {
		folder := filepath.Join(dir, "actions", kind)
		files, err := filepath.Glob(filepath.Join(folder, "*.lua"))
		if err != nil {
			return nil, err
		}
		set := ActionSet{Definitions: map[string]string{}}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			name := strings.TrimSuffix(filepath.Base(f), ".lua")
			if name == "discovery" {
				set.Discovery = string(b)
			} else {
				set.Definitions[name] = string(b)
			}
		}
		if set.Discovery == "" || len(set.Definitions) == 0 {
			return nil, fmt.Errorf("actions of %s: %s needs discovery.lua and at least one action script", kind, folder)
		}
		c.Actions[kind] = set
	}
	return c, nil
}

// HealthKey is the argocd-cm key of a kind's health check.
func HealthKey(kind string) string { return "resource.customizations.health." + Group + "_" + kind }

// ActionsKey is the argocd-cm key of a kind's actions.
func ActionsKey(kind string) string { return "resource.customizations.actions." + Group + "_" + kind }

// ConfigMap renders the argocd-cm fragment holding every customization: a
// ConfigMap named argocd-cm in namespace argocd whose data has one key per health
// check and per kind with actions. The output is deterministic, so a test can compare
// it byte for byte with the file shipped in config/argocd.
func (c *Customizations) ConfigMap() string {
	var b strings.Builder
	b.WriteString("# Generated from the .lua files beside this file; do not edit. After changing a\n")
	b.WriteString("# script, regenerate with: go test ./internal/argocd -run TestConfigMapMatchesScripts -update\n")
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\ndata:\n")
	for _, kind := range sortedKeys(c.Health) {
		fmt.Fprintf(&b, "  %s: |\n", HealthKey(kind))
		indent(&b, c.Health[kind], 4)
	}
	for _, kind := range sortedKeys(c.Actions) {
		set := c.Actions[kind]
		fmt.Fprintf(&b, "  %s: |\n", ActionsKey(kind))
		b.WriteString("    discovery.lua: |\n")
		indent(&b, set.Discovery, 6)
		b.WriteString("    definitions:\n")
		for _, name := range sortedKeys(set.Definitions) {
			fmt.Fprintf(&b, "    - name: %s\n      action.lua: |\n", name)
			indent(&b, set.Definitions[name], 8)
		}
	}
	return b.String()
}

func indent(b *strings.Builder, text string, spaces int) {
	pad := strings.Repeat(" ", spaces)
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if line == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString(pad + line + "\n")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
