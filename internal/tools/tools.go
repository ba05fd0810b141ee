// Package tools is the registry of built-in tools: the one place that says, for each
// tool, its input type, the JSON Schema the model sees, whether it only reads, and its
// category. Validation, policy, the runner and the model client all read it.
package tools

import (
	"encoding/json"
	"sort"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Tool describes one built-in tool.
type Tool struct {
	// Name is the tool's name as the model calls it.
	Name v1alpha1.ToolName
	// Description is shown to the model.
	Description string
	// ReadOnly tools never change the workspace; only they are visible in ReadOnly mode.
	ReadOnly bool
	// Category is the tool's own category. bash has none of its own: each command is
	// classified by the shell classifier.
	Category v1alpha1.CommandCategory
	// Schema is the JSON Schema of the tool's input, as sent to the model.
	Schema string
	// JobTool tools act on the task's background jobs: the controller answers them
	// from its record of the jobs, no sandbox runs them, and only tasks with
	// isolation Session have them.
	JobTool bool
	// ControllerTool tools are proposed by the controller alone (git_push, when a
	// task with spec.workspace.git.push would succeed): no model or proposer sees
	// them, and validation refuses them from anyone else.
	ControllerTool bool
}

// GitPushInput is the input of git_push: where the change goes and what it is, as
// the person approving it sees it. Base and Tree bind the push to the change that
// was read: the push pod refuses a workspace whose tree is no longer Tree.
type GitPushInput struct {
	URL    string `json:"url"`
	Branch string `json:"branch"`
	// Secret is the credentials Secret the push uses ("" for none).
	Secret    string   `json:"secret,omitempty"`
	Base      string   `json:"base"`
	Tree      string   `json:"tree"`
	FileCount int      `json:"fileCount"`
	Files     []string `json:"files"`
}

// BashInput is the input of bash.
type BashInput struct {
	Command     string `json:"command"`
	Description string `json:"description,omitempty"`
	TimeoutMs   int64  `json:"timeoutMs,omitempty"`
	Workdir     string `json:"workdir,omitempty"`
	// RunInBackground starts the command as a background job of the task's session:
	// the call returns once the job started, and job_output, job_list and job_kill
	// act on it.
	RunInBackground bool `json:"runInBackground,omitempty"`
}

// JobInput is the input of job_output and job_kill: the job is the name of the
// background call's Execution, as the call's observation gave it.
type JobInput struct {
	Job string `json:"job"`
}

// IsBackground reports whether a bash input asks for a background job. An input
// that does not decode is not one (validation refuses it anyway).
func IsBackground(tool v1alpha1.ToolName, input []byte) bool {
	if tool != v1alpha1.ToolBash {
		return false
	}
	var in BashInput
	return json.Unmarshal(input, &in) == nil && in.RunInBackground
}

// ReadFileInput is the input of read_file. Offset is the first line (1-based), Limit
// the number of lines.
type ReadFileInput struct {
	Path   string `json:"path"`
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// WriteFileInput is the input of write_file.
type WriteFileInput struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// EditFileInput is the input of edit_file: replace the single occurrence of OldText.
type EditFileInput struct {
	Path    string `json:"path"`
	OldText string `json:"oldText"`
	NewText string `json:"newText"`
}

// GlobInput is the input of glob.
type GlobInput struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
}

// GrepInput is the input of grep (RE2 syntax).
type GrepInput struct {
	Pattern    string `json:"pattern"`
	Path       string `json:"path,omitempty"`
	Include    string `json:"include,omitempty"`
	MaxResults int    `json:"maxResults,omitempty"`
}

// ListDirInput is the input of list_dir.
type ListDirInput struct {
	Path string `json:"path,omitempty"`
}

var registry = map[v1alpha1.ToolName]Tool{}

func register(t Tool) { registry[t.Name] = t }

// Lookup returns the tool with that name.
func Lookup(name v1alpha1.ToolName) (Tool, bool) {
	t, ok := registry[name]
	return t, ok
}

// All returns every tool, sorted by name.
func All() []Tool {
	out := make([]Tool, 0, len(registry))
	for _, t := range registry {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
