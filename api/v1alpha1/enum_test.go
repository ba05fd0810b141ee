package v1alpha1_test

import (
	"fmt"
	"regexp"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// camelCase is the Kubernetes API convention for enum values: CamelCase, with
// initialisms in capitals (ReadOnly, VCSDestructive, NoMatch).
var camelCase = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// toolNames are the one exception: a tool's name is its identifier, the same in the
// model's tool list, in MCP's tools/list and in policies (match.tools), not a value
// the API chose, so it keeps the form tools are named in (read_file).
var toolNames = []v1.ToolName{
	v1.ToolBash, v1.ToolReadFile, v1.ToolWriteFile, v1.ToolEditFile, v1.ToolGlob, v1.ToolGrep,
	v1.ToolListDir, v1.ToolJobOutput, v1.ToolJobList, v1.ToolJobKill, v1.ToolGitPush,
}

// TestEnumValuesAreCamelCase walks every schema of the generated CRDs: an enum value
// is typed into policy CEL, selectors and scripts, where no conversion can rewrite it
// later, so each must be CamelCase now.
func TestEnumValuesAreCamelCase(t *testing.T) {
	enums := 0
	for _, crd := range generatedCRDs(t) {
		for _, version := range crd.Spec.Versions {
			if version.Schema == nil || version.Schema.OpenAPIV3Schema == nil {
				continue
			}
			walkEnums(crd.Spec.Names.Kind+"."+version.Name, version.Schema.OpenAPIV3Schema, func(path string, value string) {
				enums++
				if !camelCase.MatchString(value) && !slices.Contains(toolNames, v1.ToolName(value)) {
					t.Errorf("%s: enum value %q is not CamelCase", path, value)
				}
			})
		}
	}
	if enums == 0 {
		t.Fatal("no enum values found: the walk reads nothing")
	}
}

// TestEnumWalkFindsWhatIsNotCamelCase: the walk reaches enums nested in properties,
// items and maps, and the check refuses the values this API used to have.
func TestEnumWalkFindsWhatIsNotCamelCase(t *testing.T) {
	enum := func(values ...string) *apiextensionsv1.JSONSchemaProps {
		p := &apiextensionsv1.JSONSchemaProps{Type: "string"}
		for _, v := range values {
			p.Enum = append(p.Enum, apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf("%q", v))})
		}
		return p
	}
	schema := &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"category": *enum("ReadOnly", "read-only"),
		"parts": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"category": *enum("vcs-destructive")},
		}}},
		"byResult": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: enum("no_match")}},
	}}
	var bad []string
	walkEnums("Test", schema, func(path, value string) {
		if !camelCase.MatchString(value) {
			bad = append(bad, path+"="+value)
		}
	})
	slices.Sort(bad)
	if want := []string{"Test.byResult.*=no_match", "Test.category=read-only", "Test.parts[].category=vcs-destructive"}; !slices.Equal(bad, want) {
		t.Errorf("found %v, want %v", bad, want)
	}
}

// walkEnums calls found for each enum value of a schema and of every schema inside it.
func walkEnums(path string, s *apiextensionsv1.JSONSchemaProps, found func(path, value string)) {
	if s == nil {
		return
	}
	for _, raw := range s.Enum {
		var value any
		if err := yaml.Unmarshal(raw.Raw, &value); err != nil {
			found(path, string(raw.Raw))
			continue
		}
		str, ok := value.(string)
		if !ok {
			found(path, fmt.Sprint(value))
			continue
		}
		found(path, str)
	}
	for name, p := range s.Properties {
		walkEnums(path+"."+name, &p, found)
	}
	if s.Items != nil {
		walkEnums(path+"[]", s.Items.Schema, found)
		for i := range s.Items.JSONSchemas {
			walkEnums(fmt.Sprintf("%s[%d]", path, i), &s.Items.JSONSchemas[i], found)
		}
	}
	if s.AdditionalProperties != nil {
		walkEnums(path+".*", s.AdditionalProperties.Schema, found)
	}
	for _, group := range [][]apiextensionsv1.JSONSchemaProps{s.AllOf, s.AnyOf, s.OneOf} {
		for i := range group {
			walkEnums(path, &group[i], found)
		}
	}
	walkEnums(path, s.Not, found)
}
