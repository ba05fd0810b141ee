package tools

import (
	"slices"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Visible returns the tools a task in this mode shows the model, sorted by name:
// the mode's own filter first, then the task's allow-list (empty allows all).
//
// ReadOnly mode shows the read-only tools and bash. bash is visible there because
// reading through the shell (git log, grep -r, go doc) is most of what a read-only
// task does; it is safe because the policy engine treats ReadOnly as a ceiling: every
// bash command that the classifier does not call read-only is denied, whatever a
// rule says (policy.Decide).
//
// The background-job tools are visible only with isolation Session: a job lives in
// a session. A controller tool (git_push) is never visible: only toolgate calls it.
func Visible(mode v1alpha1.TaskMode, allow []v1alpha1.ToolName, isolation v1alpha1.SandboxIsolation) []Tool {
	var out []Tool
	for _, t := range All() {
		if t.ControllerTool {
			continue
		}
		if readOnlyMode(mode) && !t.ReadOnly && t.Name != v1alpha1.ToolBash {
			continue
		}
		if t.JobTool && isolation != v1alpha1.IsolationSession {
			continue
		}
		if len(allow) > 0 && !slices.Contains(allow, t.Name) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// IsVisible says whether a task in this mode with this allow-list shows the tool.
func IsVisible(mode v1alpha1.TaskMode, allow []v1alpha1.ToolName, isolation v1alpha1.SandboxIsolation, name v1alpha1.ToolName) bool {
	for _, t := range Visible(mode, allow, isolation) {
		if t.Name == name {
			return true
		}
	}
	return false
}

// readOnlyMode treats every mode other than Edit and Auto (including an empty one)
// as ReadOnly, so an unset or unexpected mode fails closed.
func readOnlyMode(mode v1alpha1.TaskMode) bool {
	return mode != v1alpha1.ModeEdit && mode != v1alpha1.ModeAuto
}
