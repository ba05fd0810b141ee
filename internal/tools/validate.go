package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// compiled holds each tool's compiled schema; the schemas are compiled once, on first use.
var compiled = sync.OnceValues(compileAll)

func compileAll() (map[v1alpha1.ToolName]*jsonschema.Schema, error) {
	out := make(map[v1alpha1.ToolName]*jsonschema.Schema, len(registry))
	for name, t := range registry {
		s, err := compileSchema(name, t.Schema)
		if err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, nil
}

func compileSchema(name v1alpha1.ToolName, schema string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("schema of tool %q is not JSON: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "toolgate:///tools/" + string(name) + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("schema of tool %q: %w", name, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("schema of tool %q does not compile: %w", name, err)
	}
	return s, nil
}

// Validate checks a tool call's raw JSON input against the tool's schema. It returns
// the normalized input — canonical JSON: object keys sorted, no insignificant space,
// numbers as written — and every error found, each prefixed with the JSON path of the
// offending value, for example "/timeoutMs: must be >= 1 (got 0)". The normalized
// input is nil whenever errs is not empty. What is decided, fingerprinted and executed
// is the normalized input, so a duplicated key cannot mean one thing to the policy and
// another to the runner.
func Validate(tool v1alpha1.ToolName, raw json.RawMessage) (normalized json.RawMessage, errs []string) {
	t, ok := registry[tool]
	if !ok {
		return nil, []string{fmt.Sprintf("/: unknown tool %q; the tools are %s", tool, strings.Join(names(), ", "))}
	}
	schemas, err := compiled()
	if err != nil {
		// A schema that does not compile is a programming error caught by the tests.
		return nil, []string{fmt.Sprintf("/: tool %q cannot be validated: %v", t.Name, err)}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var value any
	if err := dec.Decode(&value); err != nil {
		return nil, []string{fmt.Sprintf("/: input is not valid JSON: %v", err)}
	}
	if dec.More() {
		return nil, []string{"/: input has trailing data after the JSON value"}
	}
	if err := schemas[tool].Validate(value); err != nil {
		var verr *jsonschema.ValidationError
		if !asValidationError(err, &verr) {
			return nil, []string{fmt.Sprintf("/: %v", err)}
		}
		errs = flatten(verr, nil)
		sort.Strings(errs)
		return nil, errs
	}
	out, err := Canonical(value)
	if err != nil {
		return nil, []string{fmt.Sprintf("/: %v", err)}
	}
	return out, nil
}

// Canonical encodes a decoded JSON value as canonical JSON: object keys sorted, no
// insignificant whitespace, no HTML escaping. Decode with UseNumber so numbers keep
// their exact text.
func Canonical(value any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// encoding/json writes map keys sorted, which is what makes the output canonical.
	if err := enc.Encode(value); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

func asValidationError(err error, target **jsonschema.ValidationError) bool {
	return errors.As(err, target)
}

var printer = message.NewPrinter(language.English)

// flatten collects the leaf errors of a validation error tree, one line each.
func flatten(e *jsonschema.ValidationError, out []string) []string {
	if len(e.Causes) == 0 {
		return append(out, describe(e)...)
	}
	for _, c := range e.Causes {
		out = flatten(c, out)
	}
	return out
}

// describe phrases one leaf error with its JSON path. Missing and unknown properties
// are reported at the property's own path, which is where a reader looks for them.
func describe(e *jsonschema.ValidationError) []string {
	at := pointer(e.InstanceLocation)
	child := func(name string) string { return pointer(append(append([]string{}, e.InstanceLocation...), name)) }
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		out := make([]string, 0, len(k.Missing))
		for _, m := range k.Missing {
			out = append(out, child(m)+": is required")
		}
		return out
	case *kind.AdditionalProperties:
		out := make([]string, 0, len(k.Properties))
		for _, p := range k.Properties {
			out = append(out, child(p)+": unknown property; remove it")
		}
		return out
	case *kind.Type:
		return []string{fmt.Sprintf("%s: must be %s, got %s", at, strings.Join(k.Want, " or "), k.Got)}
	case *kind.Minimum:
		return []string{fmt.Sprintf("%s: must be >= %s (got %s)", at, k.Want.RatString(), k.Got.RatString())}
	case *kind.Maximum:
		return []string{fmt.Sprintf("%s: must be <= %s (got %s)", at, k.Want.RatString(), k.Got.RatString())}
	case *kind.MinLength:
		return []string{fmt.Sprintf("%s: must be at least %d characters long (got %d)", at, k.Want, k.Got)}
	case *kind.MaxLength:
		return []string{fmt.Sprintf("%s: must be at most %d characters long (got %d)", at, k.Want, k.Got)}
	default:
		return []string{at + ": " + e.ErrorKind.LocalizedString(printer)}
	}
}

// pointer renders an instance location as a JSON Pointer (RFC 6901).
func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// names are the tools an agent may call: a controller tool is not named to it.
func names() []string {
	out := make([]string, 0, len(registry))
	for name, t := range registry {
		if !t.ControllerTool {
			out = append(out, string(name))
		}
	}
	sort.Strings(out)
	return out
}
