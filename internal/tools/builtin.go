package tools

import "github.com/toolgate/toolgate/api/v1alpha1"

// The schemas bound every string and number, so that a runaway model cannot push
// megabytes through one intent: commands 16 KiB, paths 4 KiB, file contents 1 MiB,
// timeouts one day (the task's budgets clamp further).
func init() {
	register(Tool{
		Name: v1alpha1.ToolBash,
		Description: "Run a bash command in the workspace and return its output with an [exit code: N] marker. " +
			"The command is parsed and every part of it is classified before a policy decides whether it runs.",
		ReadOnly: false,
		Schema: `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1, "maxLength": 16384, "description": "The bash command to run."},
    "description": {"type": "string", "maxLength": 1024, "description": "What the command does, in a few words, for the people who review it."},
    "timeoutMs": {"type": "integer", "minimum": 1, "maximum": 86400000, "description": "Timeout in milliseconds; the task's maximum applies."},
    "workdir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Working directory relative to the workspace root; default the root."},
    "runInBackground": {"type": "boolean", "description": "Start the command as a background job and return at once with its job id; read it with job_output, stop it with job_kill. It runs until it ends, its timeout, job_kill or the task's end. Only in tasks with isolation Session."}
  },
  "required": ["command"],
  "additionalProperties": false
}`,
	})
	register(Tool{
		Name:        v1alpha1.ToolReadFile,
		Description: "Read a text file of the workspace, optionally a range of lines.",
		ReadOnly:    true,
		Category:    v1alpha1.CategoryReadOnly,
		Schema: `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "File path relative to the workspace root."},
    "offset": {"type": "integer", "minimum": 1, "description": "First line to read, 1-based; default 1."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 100000, "description": "Number of lines to read; default the whole file within the output cap."}
  },
  "required": ["path"],
  "additionalProperties": false
}`,
	})
	register(Tool{
		Name:        v1alpha1.ToolWriteFile,
		Description: "Create or overwrite a file of the workspace with the given content.",
		ReadOnly:    false,
		Category:    v1alpha1.CategoryWrite,
		Schema: `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "File path relative to the workspace root."},
    "content": {"type": "string", "maxLength": 1048576, "description": "The whole new content of the file."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`,
	})
	register(Tool{
		Name: v1alpha1.ToolEditFile,
		Description: "Replace the single occurrence of oldText with newText in a file of the workspace. " +
			"The file must have been read with read_file earlier in the task and not changed since.",
		ReadOnly: false,
		Category: v1alpha1.CategoryWrite,
		Schema: `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "File path relative to the workspace root."},
    "oldText": {"type": "string", "minLength": 1, "maxLength": 1048576, "description": "Exact text to replace; it must occur exactly once."},
    "newText": {"type": "string", "maxLength": 1048576, "description": "Replacement text."}
  },
  "required": ["path", "oldText", "newText"],
  "additionalProperties": false
}`,
	})
	register(Tool{
		Name:        v1alpha1.ToolGlob,
		Description: "List the workspace files whose path matches a glob pattern (with ** for any depth).",
		ReadOnly:    true,
		Category:    v1alpha1.CategoryReadOnly,
		Schema: `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Glob pattern, for example **/*.go."},
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Directory to search, relative to the workspace root; default the root."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`,
	})
	register(Tool{
		Name:        v1alpha1.ToolGrep,
		Description: "Search the workspace files for lines matching a regular expression (RE2 syntax).",
		ReadOnly:    true,
		Category:    v1alpha1.CategoryReadOnly,
		Schema: `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Regular expression, RE2 syntax."},
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "File or directory to search, relative to the workspace root; default the root."},
    "include": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Glob that file names must match, for example *.go."},
    "maxResults": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "Maximum number of matching lines; default 1000."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`,
	})
	register(Tool{
		Name:        v1alpha1.ToolListDir,
		Description: "List the entries of a workspace directory.",
		ReadOnly:    true,
		Category:    v1alpha1.CategoryReadOnly,
		Schema: `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Directory relative to the workspace root; default the root."}
  },
  "additionalProperties": false
}`,
	})
	jobSchema := `{
  "type": "object",
  "properties": {
    "job": {"type": "string", "minLength": 1, "maxLength": 253, "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "description": "The job id that bash with runInBackground returned."}
  },
  "required": ["job"],
  "additionalProperties": false
}`
	register(Tool{
		Name:        v1alpha1.ToolJobOutput,
		Description: "Show a background job's state (running, or its exit code) and its output so far, head and tail within the output cap.",
		ReadOnly:    true,
		Category:    v1alpha1.CategoryReadOnly,
		JobTool:     true,
		Schema:      jobSchema,
	})
	register(Tool{
		Name:        v1alpha1.ToolJobList,
		Description: "List this task's background jobs: id, state and command.",
		ReadOnly:    true,
		Category:    v1alpha1.CategoryReadOnly,
		JobTool:     true,
		Schema: `{
  "type": "object",
  "properties": {},
  "additionalProperties": false
}`,
	})
	register(Tool{
		Name:        v1alpha1.ToolJobKill,
		Description: "Stop a background job: its whole process tree is killed, and its output so far is kept.",
		ReadOnly:    false,
		Category:    v1alpha1.CategoryWrite,
		JobTool:     true,
		Schema:      jobSchema,
	})
	register(Tool{
		Name:           v1alpha1.ToolGitPush,
		Description:    "Push the task's change as one commit on a new branch of its repository (proposed by toolgate, never by the model).",
		ReadOnly:       false,
		Category:       v1alpha1.CategoryNetwork,
		ControllerTool: true,
		Schema: `{
  "type": "object",
  "properties": {
    "url": {"type": "string", "minLength": 1, "maxLength": 2048, "description": "The repository pushed to: spec.workspace.git.url."},
    "branch": {"type": "string", "minLength": 1, "maxLength": 200, "description": "The new branch: spec.workspace.git.push.branch."},
    "secret": {"type": "string", "maxLength": 253, "description": "The credentials Secret the push uses."},
    "base": {"type": "string", "pattern": "^[0-9a-f]{40}$", "description": "The commit the workspace was cloned at: the new commit's parent."},
    "tree": {"type": "string", "pattern": "^[0-9a-f]{40}$", "description": "The tree of the change that was read: the push refuses any other."},
    "fileCount": {"type": "integer", "minimum": 1, "description": "How many files the change touches."},
    "files": {"type": "array", "maxItems": 50, "items": {"type": "string", "maxLength": 4096}, "description": "The files changed (the first 50)."}
  },
  "required": ["url", "branch", "base", "tree", "fileCount", "files"],
  "additionalProperties": false
}`,
	})
}
