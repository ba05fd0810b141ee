package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// generatedCRDs reads the CRDs of config/crd/bases.
func generatedCRDs(t *testing.T) []apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	var out []apiextensionsv1.CustomResourceDefinition
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, crd)
	}
	return out
}

// TestStatusIsBounded walks the status of every generated CRD: each string must have
// a maxLength (or be an enum, a timestamp or a quantity), each list a maxItems, and
// there is no map (a keyed list, listType=map, holds what a map would) but the
// resource quantities of a recorded sandbox, by resource name as a container takes
// them, with a maxProperties. A status without bounds grows until a write is refused
// for its size, after the controller acted on what it could not record.
func TestStatusIsBounded(t *testing.T) {
	var problems []string
	for _, crd := range generatedCRDs(t) {
		for _, version := range crd.Spec.Versions {
			status, ok := version.Schema.OpenAPIV3Schema.Properties["status"]
			if !ok {
				continue
			}
			walkBounds(crd.Spec.Names.Kind+" "+version.Name+" status", status, &problems)
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

func walkBounds(path string, s apiextensionsv1.JSONSchemaProps, problems *[]string) {
	switch {
	case s.XIntOrString:
		// A quantity or a port: its size is bounded by its syntax.
	case s.Type == "string":
		if s.MaxLength == nil && len(s.Enum) == 0 && s.Format != "date-time" {
			*problems = append(*problems, path+": a string without maxLength")
		}
	case s.Type == "array":
		if s.MaxItems == nil {
			*problems = append(*problems, path+": a list without maxItems")
		}
		if s.Items != nil && s.Items.Schema != nil {
			walkBounds(path+"[]", *s.Items.Schema, problems)
		}
	case s.Type == "object":
		if ap := s.AdditionalProperties; ap != nil && ap.Schema != nil {
			if !ap.Schema.XIntOrString {
				*problems = append(*problems, path+": a map (use a list keyed with listType=map)")
			}
			if s.MaxProperties == nil {
				*problems = append(*problems, path+": a map without maxProperties")
			}
			walkBounds(path+"{}", *ap.Schema, problems)
		}
		if s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields {
			*problems = append(*problems, path+": an object that keeps unknown fields, of any size")
		}
		names := make([]string, 0, len(s.Properties))
		for name := range s.Properties {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			walkBounds(path+"."+name, s.Properties[name], problems)
		}
	}
}

// schemaAt is the schema of kind's first version at a dotted path from the root
// ("spec.tools[]" steps into a list's items).
func schemaAt(t *testing.T, crds []apiextensionsv1.CustomResourceDefinition, kind, path string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	for _, crd := range crds {
		if crd.Spec.Names.Kind != kind {
			continue
		}
		s := *crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, step := range strings.Split(path, ".") {
			name, items := strings.CutSuffix(step, "[]")
			next, ok := s.Properties[name]
			if !ok {
				t.Fatalf("%s has no %s (at %s)", kind, path, step)
			}
			s = next
			if items {
				s = *s.Items.Schema
			}
		}
		return s
	}
	t.Fatalf("no CRD of kind %s", kind)
	return apiextensionsv1.JSONSchemaProps{}
}

// TestOutputBoundsDeriveFromOneConstant: the CRD markers that bound a call's output
// and the status the controller fills state the numbers of api/v1alpha1/limits.go,
// which the code that fills them enforces.
func TestOutputBoundsDeriveFromOneConstant(t *testing.T) {
	crds := generatedCRDs(t)
	for _, c := range []struct {
		kind, path string
		got        func(apiextensionsv1.JSONSchemaProps) *float64
		want       int
	}{
		{"AgentTask", "spec.budgets.maxOutputBytes", maximum, int(v1.MaxOutputBytesLimit)},
		{"Execution", "spec.maxOutputBytes", maximum, int(v1.MaxOutputBytesLimit)},
		{"ToolIntent", "status.decision.sandbox.maxOutputBytes", maximum, int(v1.MaxOutputBytesLimit)},
		{"Approval", "spec.request.sandbox.maxOutputBytes", maximum, int(v1.MaxOutputBytesLimit)},
		{"Execution", "status.output", maxLength, v1.MaxOutputTextBytes},
		{"ToolIntent", "status.observation.summary", maxLength, v1.MaxOutputTextBytes},
		{"AgentTask", "status.result", maxLength, v1.MaxResultBytes},
		{"AgentTask", "status.ruleFires", maxItems, v1.MaxRuleFires},
		{"AgentTask", "status.ruleFires[].id", maxLength, v1.MaxPolicyRuleIDBytes},
		{"ToolIntent", "status.validation.errors", maxItems, v1.MaxValidationErrors},
		{"ToolIntent", "status.validation.errors[]", maxLength, v1.MaxValidationErrorBytes},
		{"ToolIntent", "status.decision.sandbox.profile.resources.limits", maxProperties, v1.MaxResourceNames},
		{"ToolIntent", "status.decision.sandbox.profile.resources.requests", maxProperties, v1.MaxResourceNames},
		{"Execution", "spec.sandbox.resources.limits", maxProperties, v1.MaxResourceNames},
	} {
		if got := c.got(schemaAt(t, crds, c.kind, c.path)); got == nil || int(*got) != c.want {
			t.Errorf("%s %s: the CRD says %v, the code enforces %d", c.kind, c.path, deref(got), c.want)
		}
	}
	// The task's own resources are bounded by a CEL rule, to the same number.
	if rules := schemaAt(t, crds, "AgentTask", "spec.sandbox.resources").XValidations; !slices.ContainsFunc(rules, func(r apiextensionsv1.ValidationRule) bool {
		return strings.Contains(r.Rule, fmt.Sprintf("size(self.limits) <= %d", v1.MaxResourceNames)) && strings.Contains(r.Rule, fmt.Sprintf("size(self.requests) <= %d", v1.MaxResourceNames))
	}) {
		t.Errorf("AgentTask spec.sandbox.resources: no rule bounds limits and requests to %d resources", v1.MaxResourceNames)
	}
	// byOutcome holds one entry per outcome: its bound must leave room for each.
	outcomes := len(schemaAt(t, crds, "AgentTask", "status.intents.byOutcome[].outcome").Enum)
	if got := maxItems(schemaAt(t, crds, "AgentTask", "status.intents.byOutcome")); got == nil || int(*got) < outcomes {
		t.Errorf("AgentTask status.intents.byOutcome: maxItems %v, but there are %d outcomes", deref(got), outcomes)
	}
}

// The keyed lists of status, and the service accounts that may propose, are maps to
// the API server (listType=map) with the keys that make an entry unique, so that a
// merge or an apply replaces an entry rather than the list.
func TestStatusKeyedListsAreMaps(t *testing.T) {
	crds := generatedCRDs(t)
	for _, c := range []struct {
		kind, path string
		keys       []string
	}{
		{"AgentTask", "status.ruleFires", []string{"id"}},
		{"AgentTask", "spec.agent.external.proposers.serviceAccounts", []string{"namespace", "name"}},
		{"AgentTask", "status.intents.byOutcome", []string{"outcome"}},
	} {
		s := schemaAt(t, crds, c.kind, c.path)
		if s.XListType == nil || *s.XListType != "map" || !slices.Equal(s.XListMapKeys, c.keys) {
			t.Errorf("%s %s: listType %v keyed by %v, want map keyed by %v", c.kind, c.path, orUnset(s.XListType), s.XListMapKeys, c.keys)
		}
		for _, k := range c.keys {
			if !slices.Contains(s.Items.Schema.Required, k) {
				t.Errorf("%s %s: the key %s is not required", c.kind, c.path, k)
			}
		}
	}
}

func orUnset(s *string) string {
	if s == nil {
		return "unset"
	}
	return *s
}

func maximum(s apiextensionsv1.JSONSchemaProps) *float64 { return s.Maximum }
func maxLength(s apiextensionsv1.JSONSchemaProps) *float64 {
	if s.MaxLength == nil {
		return nil
	}
	f := float64(*s.MaxLength)
	return &f
}
func maxProperties(s apiextensionsv1.JSONSchemaProps) *float64 {
	if s.MaxProperties == nil {
		return nil
	}
	f := float64(*s.MaxProperties)
	return &f
}
func maxItems(s apiextensionsv1.JSONSchemaProps) *float64 {
	if s.MaxItems == nil {
		return nil
	}
	f := float64(*s.MaxItems)
	return &f
}
func deref(f *float64) any {
	if f == nil {
		return "nothing"
	}
	return *f
}

// namesTaken are resource names and short names that kubectl already resolves in
// clusters shared with common projects: core Kubernetes, Tekton (task, taskrun,
// pipelinerun), Argo CD, Argo Rollouts (at is its AnalysisTemplate), Argo Workflows,
// cert-manager, Knative Serving, Kueue and JobSet. A toolgate short name among them
// makes kubectl get NAME pick one of the two kinds.
var namesTaken = []string{
	"po", "svc", "deploy", "rs", "sts", "ds", "cm", "ns", "no", "pv", "pvc", "sa", "ing", "netpol",
	"pdb", "hpa", "cj", "ep", "ev", "rc", "sc", "pc", "crd", "csr", "quota", "limits",
	"task", "tasks", "taskrun", "tr", "pipeline", "pipelinerun", "pr",
	"app", "apps", "appproj", "appset",
	"ro", "at", "ar", "cat", "exp",
	"wf", "cwf", "wftmpl", "cwftmpl",
	"cert", "certs", "cr", "crs",
	"ksvc", "rt", "rev", "cfg",
	"queue", "queues", "lq", "cq", "wl", "js",
}

// Every kind is in the toolgate category (kubectl get toolgate lists them all), and
// no short name is one that kubectl already resolves to another common kind.
func TestNamesCollideWithNoCommonKind(t *testing.T) {
	for _, crd := range generatedCRDs(t) {
		n := crd.Spec.Names
		if !slices.Contains(n.Categories, "toolgate") {
			t.Errorf("%s is not in the toolgate category: %v", n.Kind, n.Categories)
		}
		for _, s := range n.ShortNames {
			if slices.Contains(namesTaken, s) {
				t.Errorf("%s's short name %q is already another common kind's", n.Kind, s)
			}
		}
	}
}
