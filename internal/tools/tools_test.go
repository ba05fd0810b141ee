package tools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

func TestEveryBuiltinToolIsRegisteredWithACompilingSchema(t *testing.T) {
	want := []v1alpha1.ToolName{
		v1alpha1.ToolBash, v1alpha1.ToolEditFile, v1alpha1.ToolGitPush, v1alpha1.ToolGlob, v1alpha1.ToolGrep,
		v1alpha1.ToolJobKill, v1alpha1.ToolJobList, v1alpha1.ToolJobOutput,
		v1alpha1.ToolListDir, v1alpha1.ToolReadFile, v1alpha1.ToolWriteFile,
	}
	var got []v1alpha1.ToolName
	for _, tool := range All() {
		got = append(got, tool.Name)
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
		if _, err := compileSchema(tool.Name, tool.Schema); err != nil {
			t.Errorf("%s: %v", tool.Name, err)
		}
		var schema struct {
			AdditionalProperties *bool `json:"additionalProperties"`
		}
		if err := json.Unmarshal([]byte(tool.Schema), &schema); err != nil {
			t.Errorf("%s: schema is not JSON: %v", tool.Name, err)
		} else if schema.AdditionalProperties == nil || *schema.AdditionalProperties {
			t.Errorf("%s: schema must set additionalProperties: false", tool.Name)
		}
		if tool.ReadOnly != (tool.Category == v1alpha1.CategoryReadOnly) {
			t.Errorf("%s: ReadOnly=%v disagrees with category %q", tool.Name, tool.ReadOnly, tool.Category)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("registered tools (-want +got):\n%s", diff)
	}
	if bash, _ := Lookup(v1alpha1.ToolBash); bash.Category != "" {
		t.Errorf("bash must have no category of its own, got %q", bash.Category)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name       string
		tool       v1alpha1.ToolName
		input      string
		normalized string
		errs       []string
	}{
		{name: "bash minimal", tool: "bash", input: `{"command":"ls"}`, normalized: `{"command":"ls"}`},
		{
			name:       "keys sorted, space removed, numbers kept, no HTML escaping",
			tool:       "bash",
			input:      ` { "workdir": "src", "timeoutMs": 1000 , "command": "a && b > c" } `,
			normalized: `{"command":"a && b > c","timeoutMs":1000,"workdir":"src"}`,
		},
		{name: "duplicate key keeps the last, and that is what is decided", tool: "bash", input: `{"command":"ls","command":"rm x"}`, normalized: `{"command":"rm x"}`},
		{name: "timeout below minimum", tool: "bash", input: `{"command":"ls","timeoutMs":0}`, errs: []string{"/timeoutMs: must be >= 1 (got 0)"}},
		{name: "timeout not an integer", tool: "bash", input: `{"command":"ls","timeoutMs":1.5}`, errs: []string{"/timeoutMs: must be integer, got number"}},
		{name: "missing command", tool: "bash", input: `{}`, errs: []string{"/command: is required"}},
		{name: "empty command", tool: "bash", input: `{"command":""}`, errs: []string{"/command: must be at least 1 characters long (got 0)"}},
		{name: "unknown property", tool: "bash", input: `{"command":"ls","cwd":"/"}`, errs: []string{"/cwd: unknown property; remove it"}},
		{
			name:  "every error reported",
			tool:  "read_file",
			input: `{"path":7,"offset":0,"limit":100001,"extra":true}`,
			errs: []string{
				"/extra: unknown property; remove it",
				"/limit: must be <= 100000 (got 100001)",
				"/offset: must be >= 1 (got 0)",
				"/path: must be string, got number",
			},
		},
		{name: "edit_file needs all three", tool: "edit_file", input: `{"path":"a"}`, errs: []string{"/newText: is required", "/oldText: is required"}},
		{name: "not an object", tool: "list_dir", input: `["a"]`, errs: []string{"/: must be object, got array"}},
		{name: "not JSON", tool: "glob", input: `{"pattern":`, errs: []string{"/: input is not valid JSON: unexpected EOF"}},
		{name: "trailing data", tool: "glob", input: `{"pattern":"*"} {}`, errs: []string{"/: input has trailing data after the JSON value"}},
		{name: "unknown tool", tool: "python", input: `{}`, errs: []string{`/: unknown tool "python"; the tools are bash, edit_file, glob, grep, job_kill, job_list, job_output, list_dir, read_file, write_file`}},
		{name: "bash in the background", tool: "bash", input: `{"runInBackground":true,"command":"make serve"}`, normalized: `{"command":"make serve","runInBackground":true}`},
		{name: "job_output ok", tool: "job_output", input: `{"job":"fix-tests-3-a1b2c"}`, normalized: `{"job":"fix-tests-3-a1b2c"}`},
		{name: "job_list takes nothing", tool: "job_list", input: `{"job":"x"}`, errs: []string{"/job: unknown property; remove it"}},
		{name: "a job id is a name, not a path", tool: "job_kill", input: `{"job":"../x"}`, errs: []string{"/job: '../x' does not match pattern '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'"}},
		{name: "grep ok", tool: "grep", input: `{"pattern":"func ","include":"*.go","maxResults":5}`, normalized: `{"include":"*.go","maxResults":5,"pattern":"func "}`},
		{name: "write_file content may be empty", tool: "write_file", input: `{"path":"a","content":""}`, normalized: `{"content":"","path":"a"}`},
		{name: "list_dir without path", tool: "list_dir", input: `{}`, normalized: `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			normalized, errs := Validate(tt.tool, json.RawMessage(tt.input))
			if diff := cmp.Diff(tt.errs, errs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if string(normalized) != tt.normalized {
				t.Errorf("normalized = %s, want %s", normalized, tt.normalized)
			}
		})
	}
}

func TestVisible(t *testing.T) {
	names := func(ts []Tool) []v1alpha1.ToolName {
		var out []v1alpha1.ToolName
		for _, tool := range ts {
			out = append(out, tool.Name)
		}
		return out
	}
	all := []v1alpha1.ToolName{"bash", "edit_file", "glob", "grep", "list_dir", "read_file", "write_file"}
	readOnly := []v1alpha1.ToolName{"bash", "glob", "grep", "list_dir", "read_file"}
	session := v1alpha1.IsolationSession
	tests := []struct {
		mode      v1alpha1.TaskMode
		allow     []v1alpha1.ToolName
		isolation v1alpha1.SandboxIsolation
		want      []v1alpha1.ToolName
	}{
		{mode: v1alpha1.ModeEdit, isolation: session, want: []v1alpha1.ToolName{"bash", "edit_file", "glob", "grep", "job_kill", "job_list", "job_output", "list_dir", "read_file", "write_file"}},
		{mode: v1alpha1.ModeReadOnly, isolation: session, want: []v1alpha1.ToolName{"bash", "glob", "grep", "job_list", "job_output", "list_dir", "read_file"}},
		{mode: v1alpha1.ModeEdit, isolation: v1alpha1.IsolationPerCall, want: all},
		{mode: v1alpha1.ModeReadOnly, want: readOnly},
		{mode: "", want: readOnly},
		{mode: v1alpha1.ModeEdit, want: all},
		{mode: v1alpha1.ModeAuto, want: all},
		{mode: v1alpha1.ModeEdit, allow: []v1alpha1.ToolName{"read_file", "write_file"}, want: []v1alpha1.ToolName{"read_file", "write_file"}},
		{mode: v1alpha1.ModeReadOnly, allow: []v1alpha1.ToolName{"read_file", "write_file"}, want: []v1alpha1.ToolName{"read_file"}},
		// git_push is the controller's: an allow-list naming it does not show it.
		{mode: v1alpha1.ModeAuto, isolation: session, allow: []v1alpha1.ToolName{"bash", "git_push"}, want: []v1alpha1.ToolName{"bash"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, names(Visible(tt.mode, tt.allow, tt.isolation))); diff != "" {
			t.Errorf("Visible(%q, %v, %q) (-want +got):\n%s", tt.mode, tt.allow, tt.isolation, diff)
		}
	}
	if IsVisible(v1alpha1.ModeReadOnly, nil, session, v1alpha1.ToolWriteFile) {
		t.Error("write_file must not be visible in ReadOnly mode")
	}
}

// TestAgentTaskToolsEnumIsTheRegistry: spec.tools of the AgentTask CRD accepts exactly
// the tools a task's agent may call, the registry's tools but the controller's own. A
// tool added here and not to the enum could not be named in spec.tools; a name left in
// the enum would be accepted and ignored.
func TestAgentTaskToolsEnumIsTheRegistry(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "toolgate.dev_agenttasks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	var enum []string
	for _, v := range crd.Spec.Versions {
		items := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["tools"].Items
		if items == nil || items.Schema == nil {
			t.Fatalf("version %s: spec.tools has no item schema", v.Name)
		}
		enum = enum[:0]
		for _, e := range items.Schema.Enum {
			var name string
			if err := json.Unmarshal(e.Raw, &name); err != nil {
				t.Fatal(err)
			}
			enum = append(enum, name)
		}
	}
	var want []string
	for _, tool := range All() {
		if !tool.ControllerTool {
			want = append(want, string(tool.Name))
		}
	}
	slices.Sort(enum)
	if diff := cmp.Diff(want, enum); diff != "" {
		t.Errorf("the AgentTask CRD's spec.tools enum differs from the registry's agent tools (-registry +enum):\n%s", diff)
	}
}
