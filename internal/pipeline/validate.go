package pipeline

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/tools"
	"github.com/toolgate/toolgate/internal/workspace"
)

// Baseline is the last known content hash of a workspace file, from an earlier
// successful read_file, write_file or edit_file of the same task.
type Baseline struct {
	// SHA256 of the file's content.
	SHA256 string
	// Intent that observed it.
	Intent string
}

// ValidateInput is everything validation looks at.
type ValidateInput struct {
	// Intent to validate.
	Intent *v1.ToolIntent
	// Task the intent names; nil when it does not exist.
	Task *v1.AgentTask
	// EarlierIntents is the number of the task's intents created before this one.
	EarlierIntents int
	// Baselines maps a workspace path (clean, relative to the workspace root) to its
	// last known content hash, from intents observed before this one.
	Baselines map[string]Baseline
	// ControllerIdentity is the Kubernetes user the controller creates a model task's
	// intents as: the only proposer of a model task.
	ControllerIdentity string
}

// Validation is the result of validating an intent.
type Validation struct {
	// Errors lists every problem found; empty means valid.
	Errors []string
	// Normalized is the canonical JSON input (nil when the schema check failed).
	Normalized json.RawMessage
	// Path is the workspace path a file tool acts on, clean and relative ("" for none).
	Path string
	// TimeoutSeconds after defaulting and clamping.
	TimeoutSeconds int32
	// TimeoutClamped is true when the requested timeout exceeded the task's maximum.
	TimeoutClamped bool
	// Baseline an edit or overwrite is checked against.
	Baseline Baseline
}

// Status returns the API form of the validation.
func (v Validation) Status() *v1.Validation {
	return &v1.Validation{
		Errors:             boundedErrors(v.Errors),
		TimeoutSeconds:     v.TimeoutSeconds,
		TimeoutClamped:     v.TimeoutClamped,
		BaselineSHA256:     v.Baseline.SHA256,
		BaselineIntentName: v.Baseline.Intent,
	}
}

// boundedErrors is errs as status.validation.errors holds them: at most
// MaxValidationErrors, the last of them saying how many more there were when they do
// not fit, and each cut between runes to MaxValidationErrorBytes.
func boundedErrors(errs []string) []string {
	if len(errs) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(errs), v1.MaxValidationErrors))
	for i, e := range errs {
		if i == v1.MaxValidationErrors-1 && len(errs) > v1.MaxValidationErrors {
			out = append(out, fmt.Sprintf("and %d more errors", len(errs)-i))
			break
		}
		if len(e) > v1.MaxValidationErrorBytes {
			const more = " …[cut]"
			e = clip.Bytes(e, v1.MaxValidationErrorBytes-len(more)) + more
		}
		out = append(out, e)
	}
	return out
}

// TaskClosed says whether a task starts no more calls, and why: it finished, or it
// is being deleted. A call already running when its task's deletion starts runs on
// (orphan deletion keeps a task's children by request); one that has not started
// never does.
func TaskClosed(task *v1.AgentTask) (bool, string) {
	if !task.DeletionTimestamp.IsZero() {
		return true, "it is being deleted"
	}
	return TaskFinished(task)
}

// TaskFinished says whether a task ended (succeeded, failed or was cancelled), and
// how. It is the one rule of a task's end: the controllers, validation and the
// status computation all ask it (TaskStatus through EndedBy, since there a cancel
// is what makes the task Failed).
func TaskFinished(task *v1.AgentTask) (bool, string) {
	if how := EndedBy(task.Status.Conditions); how != "" {
		return true, how
	}
	if task.IsCancelled() {
		return true, "it was cancelled"
	}
	return false, ""
}

// EndedBy says how a task's status conditions ended it, "" while it runs: the part
// of TaskFinished that the status records (a cancel asked in the spec is recorded
// a moment later by the task's reconciler).
func EndedBy(conditions []metav1.Condition) string {
	if meta.IsStatusConditionTrue(conditions, v1.ConditionSucceeded) {
		return "it Succeeded"
	}
	if c := meta.FindStatusCondition(conditions, v1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
		return "it Failed (" + c.Reason + ")"
	}
	return ""
}

// NormalizedInput is the intent's input as validation normalizes it: the form that is
// decided, fingerprinted, approved and run. errs are the validation errors of an input
// that does not validate (any more), none otherwise. Validate is the first reader;
// every later step asks this, so the normalized form has one definition.
func NormalizedInput(intent *v1.ToolIntent) (normalized json.RawMessage, errs []string) {
	return tools.Validate(intent.Spec.Tool, intent.Spec.Input.Raw)
}

// Validate checks an intent in two layers: its input against the tool's JSON Schema,
// then against the task's state (the task exists and runs, the tool is visible, the
// intent budget is not spent, paths stay in the workspace, edits follow a read, the
// timeout fits the task's maximum). Every error is reported, not only the first.
func Validate(in ValidateInput) Validation {
	var v Validation
	intent := in.Intent
	normalized, errs := NormalizedInput(intent)
	v.Normalized = normalized
	for _, e := range errs {
		v.Errors = append(v.Errors, "input"+e)
	}

	task := in.Task
	if task == nil {
		v.Errors = append(v.Errors, fmt.Sprintf("spec.taskRef: AgentTask %q does not exist in this namespace", intent.Spec.TaskRef.Name))
		return v
	}
	closed, why := TaskClosed(task)
	if closed {
		v.Errors = append(v.Errors, fmt.Sprintf("spec.taskRef: AgentTask %q accepts no more intents: %s", task.Name, why))
	}
	if t, known := tools.Lookup(intent.Spec.Tool); known && t.ControllerTool {
		// The controller's own step, not the agent's: its rules replace the
		// proposer, visibility and budget checks.
		v.Errors = append(v.Errors, pushErrors(intent, task, normalized, in.ControllerIdentity)...)
		if normalized != nil {
			v.TimeoutSeconds, v.TimeoutClamped = timeoutFor(intent.Spec.Tool, normalized, task.Spec.Budgets)
		}
		return v
	}
	if pushing, what := PushPending(task); pushing && !closed {
		// What the push pushes is the tree read for it: a call of the agent's now
		// could change the worktree the approver is shown, or put back what was
		// there when it was read.
		v.Errors = append(v.Errors, fmt.Sprintf("spec.taskRef: AgentTask %q accepts no more intents: %s", task.Name, what))
	}
	if e := proposerError(intent, task, in.ControllerIdentity); e != "" {
		v.Errors = append(v.Errors, e)
	}
	if t, known := tools.Lookup(intent.Spec.Tool); known && !tools.IsVisible(task.Spec.Mode, task.Spec.Tools, task.Spec.Sandbox.Isolation, intent.Spec.Tool) {
		if t.JobTool && task.Spec.Sandbox.Isolation != v1.IsolationSession {
			v.Errors = append(v.Errors, fmt.Sprintf("spec.tool: %q acts on background jobs, and AgentTask %s has none: background jobs need spec.sandbox.isolation: Session", intent.Spec.Tool, task.Name))
		} else {
			v.Errors = append(v.Errors, fmt.Sprintf("spec.tool: %q is not available to this task (mode %s%s)", intent.Spec.Tool, modeOrDefault(task.Spec.Mode), allowListNote(task.Spec.Tools)))
		}
	}
	if TurnRetired(task.Status.History, intent) {
		v.Errors = append(v.Errors, fmt.Sprintf("spec.turn: turn %d of AgentTask %s is closed: its calls were archived and left the cluster (status.history.throughTurn is %d); propose in a later turn", intent.Spec.Turn, task.Name, task.Status.History.ThroughTurn))
	}
	if max := int(task.Spec.Budgets.MaxIntents); max > 0 && in.EarlierIntents >= max {
		v.Errors = append(v.Errors, fmt.Sprintf("the task's intent budget is spent: %d of budgets.maxIntents=%d used", in.EarlierIntents, max))
	}
	if normalized == nil {
		return v
	}
	if tools.IsBackground(intent.Spec.Tool, normalized) && task.Spec.Sandbox.Isolation != v1.IsolationSession {
		v.Errors = append(v.Errors, fmt.Sprintf("spec.input.runInBackground: a background job lives in a session, and AgentTask %s runs each call as its own Job: set spec.sandbox.isolation: Session on the task, or run the command without runInBackground", task.Name))
	}
	v.TimeoutSeconds, v.TimeoutClamped = timeoutFor(intent.Spec.Tool, normalized, task.Spec.Budgets)
	checkPaths(&v, intent.Spec.Tool, normalized, in.Baselines)
	return v
}

// proposerError says why the intent's requester may not propose calls for the task,
// or "" when it may. Anyone allowed to create ToolIntents in a namespace can name any
// task there in spec.taskRef, so the task decides who proposes into it. What this
// compares is what admission verified: spec.requestedBy is the creator
// (config/admission/toolintent-requester.yaml) and every group claimed in
// spec.requestedByGroups is one of the creator's.
func proposerError(intent *v1.ToolIntent, task *v1.AgentTask, controllerIdentity string) string {
	who := intent.Spec.RequestedBy
	switch agent := task.Spec.Agent; {
	case agent.Model != nil:
		// The agent loop creates a model task's intents as the controller; nobody
		// else speaks for the model, or an outsider's call would run as the task's.
		if controllerIdentity == "" || who != controllerIdentity {
			return fmt.Sprintf("spec.requestedBy: %s may not propose calls for AgentTask %s: its agent is a model (spec.agent.model), and only toolgate's agent loop proposes calls for a model task; propose into a task whose agent.external.proposers name you", orNobody(who), task.Name)
		}
		if !metav1.IsControlledBy(intent, task) {
			// The loop creates every intent owned by its task (by UID): one that is
			// not was not created for this task's model, whoever's name it carries.
			return fmt.Sprintf("metadata.ownerReferences: ToolIntent %s is not owned by AgentTask %s (uid %s); only toolgate's agent loop proposes calls for a model task, and it creates them owned by the task", intent.Name, task.Name, task.UID)
		}
		return ""
	case agent.External != nil:
		if who == "" {
			return "spec.requestedBy: required"
		}
		if c := metav1.GetControllerOf(intent); c != nil && (c.Kind != "AgentTask" || c.Name != task.Name || c.UID != task.UID) {
			// The proposer set its own owner (kubectl toolgate propose does, to spare
			// the adoption): it must be the task the intent names, or the call would
			// be deleted with, and shown as a child of, another object.
			return fmt.Sprintf("metadata.ownerReferences: ToolIntent %s is controlled by %s %s (uid %s), not by AgentTask %s (uid %s) that spec.taskRef names; leave the owner out, or name the task", intent.Name, c.Kind, c.Name, c.UID, task.Name, task.UID)
		}
		if IsProposer(agent.External.Proposers, who, intent.Spec.RequestedByGroups) {
			return ""
		}
		return fmt.Sprintf("spec.requestedBy: %s%s may not propose calls for AgentTask %s; its proposers are %s (the task's owner adds you to spec.agent.external.proposers; a group counts only when the intent claims it in spec.requestedByGroups)",
			who, claimedNote(intent.Spec.RequestedByGroups), task.Name, ProposersText(agent.External.Proposers))
	default:
		return fmt.Sprintf("spec.taskRef: AgentTask %s names neither spec.agent.model nor spec.agent.external, so nobody may propose calls for it", task.Name)
	}
}

// IsProposer reports whether a requester, claiming groups, is one of the proposers:
// a listed user, the user of a listed service account, or a member of a listed group
// it claims. The claim must have been checked (admission does it for ToolIntents).
func IsProposer(p v1.Proposers, user string, claimedGroups []string) bool {
	if slices.Contains(p.Users, user) {
		return true
	}
	for _, sa := range p.ServiceAccounts {
		if user == sa.UserName() {
			return true
		}
	}
	for _, g := range claimedGroups {
		if slices.Contains(p.Groups, g) {
			return true
		}
	}
	return false
}

// ProposersText names the proposers for a message, for example
// "users alice, groups team-a, service accounts ns/coding-agent".
func ProposersText(p v1.Proposers) string {
	var parts []string
	for _, l := range []struct {
		what  string
		names []string
	}{{"users", p.Users}, {"groups", p.Groups}, {"service accounts", serviceAccountNames(p.ServiceAccounts)}} {
		if len(l.names) > 0 {
			parts = append(parts, l.what+" "+strings.Join(l.names, ", "))
		}
	}
	if len(parts) == 0 {
		return "none (spec.agent.external.proposers is empty)"
	}
	return strings.Join(parts, "; ")
}

func serviceAccountNames(sas []v1.ServiceAccountReference) []string {
	out := make([]string, len(sas))
	for i, sa := range sas {
		out[i] = sa.String()
	}
	return out
}

func claimedNote(groups []string) string {
	if len(groups) == 0 {
		return ""
	}
	return " (groups " + strings.Join(groups, ", ") + ")"
}

func orNobody(who string) string {
	if who == "" {
		return "an intent without a requester"
	}
	return who
}

func modeOrDefault(m v1.TaskMode) v1.TaskMode {
	if m == "" {
		return v1.ModeReadOnly
	}
	return m
}

func allowListNote(allow []v1.ToolName) string {
	if len(allow) == 0 {
		return ""
	}
	names := make([]string, len(allow))
	for i, t := range allow {
		names[i] = string(t)
	}
	return ", tools " + strings.Join(names, ", ")
}

// timeoutFor applies the task's default and maximum to the tool call's own timeout.
func timeoutFor(tool v1.ToolName, input json.RawMessage, b v1.Budgets) (int32, bool) {
	def, limit := b.DefaultTimeoutSeconds, b.MaxTimeoutSeconds
	if def <= 0 {
		def = 120
	}
	if limit <= 0 {
		limit = 600
	}
	want := def
	if tool == v1.ToolBash {
		var in tools.BashInput
		if json.Unmarshal(input, &in) == nil && in.TimeoutMs > 0 {
			// Round up: a 1500 ms request gets 2 s, never less than asked.
			want = int32(min((in.TimeoutMs+999)/1000, 1<<30))
		}
	}
	if want > limit {
		return limit, true
	}
	return min(want, limit), false
}

// pathFields names, per tool, the input field holding a workspace path and whether it
// is required.
var pathFields = map[v1.ToolName]string{
	v1.ToolReadFile:  "path",
	v1.ToolWriteFile: "path",
	v1.ToolEditFile:  "path",
	v1.ToolGlob:      "path",
	v1.ToolGrep:      "path",
	v1.ToolListDir:   "path",
	v1.ToolBash:      "workdir",
}

func checkPaths(v *Validation, tool v1.ToolName, input json.RawMessage, baselines map[string]Baseline) {
	field, ok := pathFields[tool]
	if !ok {
		return
	}
	var fields map[string]any
	if json.Unmarshal(input, &fields) != nil {
		return
	}
	raw, _ := fields[field].(string)
	if raw == "" {
		return
	}
	clean, err := workspace.Rel(raw)
	if err != nil {
		v.Errors = append(v.Errors, fmt.Sprintf("input/%s: %v", field, err))
		return
	}
	if tool == v1.ToolBash {
		return
	}
	v.Path = clean
	base, known := baselines[clean]
	switch tool {
	case v1.ToolEditFile:
		if !known {
			v.Errors = append(v.Errors, fmt.Sprintf("input/path: edit_file needs an earlier successful read_file of %q in this task; read the file first", clean))
			return
		}
		v.Baseline = base
	case v1.ToolWriteFile:
		if known {
			v.Baseline = base
		} else {
			// Overwriting needs a read; creating does not. The runner enforces which.
			v.Baseline = Baseline{SHA256: protocol.BaselineAbsent}
		}
	}
}
