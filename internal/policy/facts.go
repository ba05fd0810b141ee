package policy

import (
	"bytes"
	"encoding/json"
	"path"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/tools"
)

// workspaceRoot is where every Execution mounts the workspace; a file tool's absolute
// path under it is matched relative to it.
const workspaceRoot = "/workspace"

// facts is what the rules look at: the call, classified once per decision.
type facts struct {
	req      Request
	tool     v1alpha1.ToolName
	input    map[string]any
	parts    []Part
	category v1alpha1.CommandCategory
	// categories are the parts' categories, each once, in the order they first occur.
	categories []v1alpha1.CommandCategory
	// path is the file tools' path, relative to the workspace.
	path    string
	hasPath bool
	cel     map[string]any
}

// analyze classifies a call: bash commands part by part, other tools by their
// registered category.
func analyze(req Request) *facts {
	input := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(req.Input))
	dec.UseNumber()
	_ = dec.Decode(&input) // the input was validated; an undecodable one has no fields
	if req.Tool == v1alpha1.ToolBash {
		command, _ := input["command"].(string)
		f := analyzeCommand(req, command)
		f.input = input
		return f
	}
	f := &facts{req: req, tool: req.Tool, input: input}
	category := v1alpha1.CategoryUnknown
	if t, ok := tools.Lookup(req.Tool); ok && t.Category != "" {
		category = t.Category
	}
	p, hasPath := input["path"].(string)
	if !hasPath && (req.Tool == v1alpha1.ToolListDir || req.Tool == v1alpha1.ToolGlob || req.Tool == v1alpha1.ToolGrep) {
		p, hasPath = ".", true // they default to the workspace root
	}
	command := string(req.Tool)
	if hasPath {
		f.path, f.hasPath = workspacePath(p), true
		command += " " + p
	}
	f.parts = []Part{{Command: command, Category: category}}
	f.category = category
	f.categories = []v1alpha1.CommandCategory{category}
	return f
}

func analyzeCommand(req Request, command string) *facts {
	c := ClassifyCommand(command)
	return &facts{
		req:        req,
		tool:       v1alpha1.ToolBash,
		input:      map[string]any{"command": command},
		parts:      c.Parts,
		category:   c.Category,
		categories: distinctCategories(c.Parts),
	}
}

// distinctCategories lists the parts' categories, each once, in the order they first
// occur.
func distinctCategories(parts []Part) []v1alpha1.CommandCategory {
	var out []v1alpha1.CommandCategory
	for _, p := range parts {
		if !slices.Contains(out, p.Category) {
			out = append(out, p.Category)
		}
	}
	return out
}

// workspacePath makes a path relative to the workspace root for glob matching.
func workspacePath(p string) string {
	p = path.Clean(p)
	if p == workspaceRoot {
		return "."
	}
	if rel, ok := strings.CutPrefix(p, workspaceRoot+"/"); ok {
		return rel
	}
	return p
}

// activation builds the CEL variables once per decision, when a rule needs them.
// Lists of strings are []string and parts are map[string]string, which CEL reads
// without converting element by element, so building them costs one allocation per
// part rather than one per word.
func (f *facts) activation() map[string]any {
	if f.cel != nil {
		return f.cel
	}
	categories := make([]string, len(f.categories))
	for i, c := range f.categories {
		categories[i] = string(c)
	}
	parts := make([]any, len(f.parts))
	argv := make([]any, 0, len(f.parts))
	for i, p := range f.parts {
		parts[i] = map[string]string{"command": p.Command, "category": string(p.Category)}
		if p.Argv != nil {
			argv = append(argv, p.Argv)
		}
	}
	f.cel = map[string]any{"intent": map[string]any{
		"tool":       string(f.tool),
		"input":      celValue(f.input),
		"categories": categories,
		"parts":      parts,
		"argv":       argv,
		"task":       f.req.Task,
		"namespace":  f.req.Namespace,
		"mode":       string(f.req.Mode),
	}}
	return f.cel
}

// celValue converts decoded JSON for CEL: json.Number becomes an int when it is
// integral, else a double, so intent.input.timeoutMs > 1000 compares numbers.
func celValue(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = celValue(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = celValue(e)
		}
		return out
	}
	return v
}
