package policy

import (
	"bytes"
	"encoding/json"
	"path"
	"slices"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/tools"
	"github.com/toolgate/toolgate/internal/workspace"
)

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
	// cel is the CEL activation, intent its one variable, holding the fields in
	// built.
	cel    map[string]any
	intent map[string]any
	built  celFields
	// decoded is the whole input as canonicalInput decodes it, and decodedOK says
	// it decoded as exactly one JSON value: the fingerprint encodes it without
	// decoding the input again.
	decoded   any
	decodedOK bool
}

// analyze classifies a call: bash commands part by part, other tools by their
// registered category.
func analyze(req Request) *facts {
	var decoded any
	dec := json.NewDecoder(bytes.NewReader(req.Input))
	dec.UseNumber()
	err := dec.Decode(&decoded)
	decodedOK := err == nil && !dec.More()
	// The input was validated; one that is not an object has no fields.
	input, _ := decoded.(map[string]any)
	if input == nil {
		input = map[string]any{}
	}
	if req.Tool == v1alpha1.ToolBash {
		command, _ := input["command"].(string)
		f := analyzeCommand(req, command)
		f.input, f.decoded, f.decodedOK = input, decoded, decodedOK
		return f
	}
	f := &facts{req: req, tool: req.Tool, input: input, decoded: decoded, decodedOK: decodedOK}
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
		f.path, f.hasPath = matchPath(p), true
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

// matchPath is a tool's path as globs match it: relative to the workspace, or, for a
// path outside it (which validation refuses anyway), cleaned as it is.
func matchPath(p string) string {
	if rel, err := workspace.Rel(p); err == nil {
		return rel
	}
	return path.Clean(p)
}

// activation builds the CEL variables once per decision, when a rule needs them,
// and of intent the fields needs names that no earlier rule needed: an expression
// sees only the fields it reads (see fieldsRead), so the others need not be built.
// Lists of strings are []string and parts are map[string]string, which CEL reads
// without converting element by element, so building them costs one allocation per
// part rather than one per word.
func (f *facts) activation(needs celFields) map[string]any {
	if f.cel == nil {
		f.intent = make(map[string]any, 8)
		f.cel = map[string]any{"intent": f.intent}
	}
	missing := needs &^ f.built
	f.built |= missing
	intent := f.intent
	if missing&celTool != 0 {
		intent["tool"] = string(f.tool)
	}
	if missing&celInput != 0 {
		intent["input"] = celValue(f.input)
	}
	if missing&celCategories != 0 {
		categories := make([]string, len(f.categories))
		for i, c := range f.categories {
			categories[i] = string(c)
		}
		intent["categories"] = categories
	}
	if missing&celParts != 0 {
		parts := make([]any, len(f.parts))
		for i, p := range f.parts {
			parts[i] = map[string]string{"command": p.Command, "category": string(p.Category)}
		}
		intent["parts"] = parts
	}
	if missing&celArgv != 0 {
		argv := make([]any, 0, len(f.parts))
		for _, p := range f.parts {
			if p.Argv != nil {
				argv = append(argv, p.Argv)
			}
		}
		intent["argv"] = argv
	}
	if missing&celTask != 0 {
		intent["task"] = f.req.Task
	}
	if missing&celNamespace != 0 {
		intent["namespace"] = f.req.Namespace
	}
	if missing&celMode != 0 {
		intent["mode"] = string(f.req.Mode)
	}
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
