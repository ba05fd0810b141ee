package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Trace is the timeline of a task rebuilt from the cluster alone; `trace -o json`
// prints it. Turns are in order and so are the intents of a turn (by index).
//
// When the agent loop stores its turn records (what the model said in each turn),
// TurnTrace gains a field for it beside Intents; nothing else changes.
type Trace struct {
	// Task is the task as it is now.
	Task TaskInfo `json:"task"`
	// Turns holds every turn that has at least one intent.
	Turns []TurnTrace `json:"turns"`
}

// TaskInfo is what a trace shows about the task itself.
type TaskInfo struct {
	Name      string       `json:"name"`
	Namespace string       `json:"namespace"`
	Goal      string       `json:"goal"`
	Mode      v1.TaskMode  `json:"mode"`
	Phase     v1.TaskPhase `json:"phase,omitempty"`
	// Turn is the task's current (or last) turn.
	Turn int32 `json:"turn"`
	// Agent is "model NAME at URL", or "external" with the agent's description.
	Agent string `json:"agent"`
	// Result is the model's final answer, once the task succeeded.
	Result string `json:"result,omitempty"`
}

// TurnTrace is one turn: the calls proposed in it.
type TurnTrace struct {
	Turn    int32         `json:"turn"`
	Intents []IntentTrace `json:"intents"`
}

// IntentTrace is one proposed call and every step toolgate recorded for it.
type IntentTrace struct {
	Name  string      `json:"name"`
	Index int32       `json:"index"`
	Tool  v1.ToolName `json:"tool"`
	// Input is the proposed input as JSON, with secrets masked.
	Input string `json:"input"`
	// Reason is the proposer's explanation, with secrets masked.
	Reason      string         `json:"reason,omitempty"`
	RequestedBy string         `json:"requestedBy"`
	ProposedBy  *v1.ProposedBy `json:"proposedBy,omitempty"`
	CreatedAt   metav1.Time    `json:"createdAt"`
	// Validation, Decision and Observation are the intent's status fields as recorded.
	Validation *v1.Validation  `json:"validation,omitempty"`
	Decision   *v1.Decision    `json:"decision,omitempty"`
	Approval   *ApprovalTrace  `json:"approval,omitempty"`
	Execution  *ExecutionTrace `json:"execution,omitempty"`
	// Observation is what the model saw.
	Observation *v1.Observation `json:"observation,omitempty"`
	// Waiting says what an intent without an observation waits for.
	Waiting string `json:"waiting,omitempty"`
	// Missing lists objects the intent's status names that no longer exist.
	Missing []string `json:"missing,omitempty"`
}

// ApprovalTrace is the human decision on an intent.
type ApprovalTrace struct {
	Name string `json:"name"`
	// Decision is what the votes decide (pipeline.CountVotes): Pending, Approved or
	// Denied, by DecidedBy (the denier, or those who approved).
	Decision  string       `json:"decision"`
	DecidedBy string       `json:"decidedBy,omitempty"`
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
	// Tally is the approvals counted out of those required, as in "1/2".
	Tally string `json:"tally"`
	// Votes are the votes as cast, comments masked.
	Votes                   []v1.ApprovalVote `json:"votes,omitempty"`
	State                   v1.ApprovalState  `json:"state,omitempty"`
	RequestedAt             metav1.Time       `json:"requestedAt"`
	ExpiresAt               metav1.Time       `json:"expiresAt"`
	Approvers               *v1.Approvers     `json:"approvers,omitempty"`
	ConsumedByExecutionName string            `json:"consumedByExecutionName,omitempty"`
	Message                 string            `json:"message,omitempty"`
}

// ExecutionTrace is the invocation that ran the call.
type ExecutionTrace struct {
	Name           string               `json:"name"`
	Phase          v1.ExecutionPhase    `json:"phase,omitempty"`
	JobName        string               `json:"jobName,omitempty"`
	SessionName    string               `json:"sessionName,omitempty"`
	Background     *v1.BackgroundStatus `json:"background,omitempty"`
	PodName        string               `json:"podName,omitempty"`
	ExitCode       *int32               `json:"exitCode,omitempty"`
	DurationMillis int64                `json:"durationMillis,omitempty"`
	ErrorKind      v1.ErrorKind         `json:"errorKind,omitempty"`
	Message        string               `json:"message,omitempty"`
	StartTime      *metav1.Time         `json:"startTime,omitempty"`
	CompletionTime *metav1.Time         `json:"completionTime,omitempty"`
	ArtifactPath   string               `json:"artifactPath,omitempty"`
	Truncated      bool                 `json:"truncated,omitempty"`
	// Walls are the decision's walls the Execution was built with; ReadOnlyWorkspace
	// and Network are the sandbox it ran in, with the walls applied.
	Walls             *v1.SandboxWalls `json:"walls,omitempty"`
	ReadOnlyWorkspace bool             `json:"readOnlyWorkspace,omitempty"`
	Network           v1.NetworkMode   `json:"network,omitempty"`
}

// BuildTrace assembles the trace of a task from its objects. It reads only what is
// recorded: nothing is re-evaluated.
func BuildTrace(task *v1.AgentTask, intents []v1.ToolIntent, approvals []v1.Approval, executions []v1.Execution) Trace {
	t := Trace{Task: TaskInfo{
		Name:      task.Name,
		Namespace: task.Namespace,
		Goal:      task.Spec.Goal,
		Mode:      task.Spec.Mode,
		Phase:     task.Status.Phase,
		Turn:      task.Status.Turn,
		Agent:     agentText(task.Spec.Agent),
		Result:    task.Status.Result,
	}, Turns: []TurnTrace{}}
	approvalByName := map[string]*v1.Approval{}
	for i := range approvals {
		approvalByName[approvals[i].Name] = &approvals[i]
	}
	executionByName := map[string]*v1.Execution{}
	for i := range executions {
		executionByName[executions[i].Name] = &executions[i]
	}
	sorted := append([]v1.ToolIntent(nil), intents...)
	sort.Slice(sorted, func(i, j int) bool { return pipeline.IntentBefore(&sorted[i], &sorted[j]) })
	for i := range sorted {
		in := &sorted[i]
		it := intentTrace(in)
		if ref := in.Status.ApprovalName; ref != "" {
			if a, ok := approvalByName[ref]; ok {
				it.Approval = approvalTrace(a)
			} else {
				it.Missing = append(it.Missing, "Approval "+ref)
			}
		}
		if ref := in.Status.ExecutionName; ref != "" {
			if e, ok := executionByName[ref]; ok {
				it.Execution = executionTrace(e)
			} else {
				it.Missing = append(it.Missing, "Execution "+ref)
			}
		}
		if n := len(t.Turns); n == 0 || t.Turns[n-1].Turn != in.Spec.Turn {
			t.Turns = append(t.Turns, TurnTrace{Turn: in.Spec.Turn})
		}
		last := &t.Turns[len(t.Turns)-1]
		last.Intents = append(last.Intents, it)
	}
	return t
}

// agentText names the task's agent: the model and its endpoint, or "external"
// with the agent's description (spec.agent.external.description) on one line.
func agentText(a v1.AgentSpec) string {
	if a.Model != nil {
		return fmt.Sprintf("model %s at %s", a.Model.Model, a.Model.BaseURL)
	}
	if a.External != nil && strings.TrimSpace(a.External.Description) != "" {
		return "external (" + strings.Join(strings.Fields(mask.Secrets(a.External.Description)), " ") + ")"
	}
	return "external"
}

func intentTrace(in *v1.ToolIntent) IntentTrace {
	it := IntentTrace{
		Name:        in.Name,
		Index:       in.Spec.Index,
		Tool:        in.Spec.Tool,
		Input:       mask.Secrets(string(in.Spec.Input.Raw)),
		Reason:      mask.Secrets(in.Spec.Reason),
		RequestedBy: mask.Escape(in.Spec.RequestedBy),
		CreatedAt:   in.CreationTimestamp,
		Validation:  in.Status.Validation,
		Observation: in.Status.Observation,
	}
	if p := in.Spec.ProposedBy; p != (v1.ProposedBy{}) {
		// What the proposer said about itself: data, shown escaped.
		it.ProposedBy = &v1.ProposedBy{Provider: mask.Escape(p.Provider), Model: mask.Escape(p.Model), ToolCallID: mask.Escape(p.ToolCallID)}
	}
	if d := in.Status.Decision; d != nil {
		it.Decision = maskedDecision(*d)
	}
	if in.Status.Observation == nil {
		it.Waiting = pipeline.WaitingFor(in)
	}
	return it
}

// maskedDecision is a decision with secrets masked in the text a person reads: the
// reason and the command parts.
func maskedDecision(d v1.Decision) *v1.Decision {
	d.Reason = mask.Secrets(d.Reason)
	parts := make([]v1.CommandPart, len(d.Parts))
	for i, p := range d.Parts {
		parts[i] = v1.CommandPart{Command: mask.Secrets(p.Command), Category: p.Category, Reason: mask.Secrets(p.Reason)}
	}
	if d.Parts == nil {
		parts = nil
	}
	d.Parts = parts
	return &d
}

func approvalTrace(a *v1.Approval) *ApprovalTrace {
	t := pipeline.CountVotes(a)
	decision, decidedBy := "Pending", ""
	switch t.Decision {
	case v1.DecisionDenied:
		decision, decidedBy = string(t.Decision), t.DeniedBy
	case v1.DecisionApproved:
		decision, decidedBy = string(t.Decision), t.Voters()
	}
	var votes []v1.ApprovalVote
	for _, vote := range a.Spec.Votes {
		vote.Comment = mask.Secrets(vote.Comment)
		votes = append(votes, vote)
	}
	return &ApprovalTrace{
		Name:                    a.Name,
		Decision:                decision,
		DecidedBy:               decidedBy,
		DecidedAt:               a.Status.DecidedAt,
		Tally:                   t.String(),
		Votes:                   votes,
		State:                   a.Status.State,
		RequestedAt:             a.CreationTimestamp,
		ExpiresAt:               a.Spec.ExpiresAt,
		Approvers:               a.Spec.Approvers,
		ConsumedByExecutionName: a.Status.ConsumedByExecutionName,
		Message:                 mask.Secrets(a.Status.Message),
	}
}

func executionTrace(e *v1.Execution) *ExecutionTrace {
	st := e.Status
	return &ExecutionTrace{
		Name:           e.Name,
		Phase:          st.Phase,
		JobName:        st.JobName,
		SessionName:    st.SessionName,
		Background:     st.Background,
		PodName:        st.PodName,
		ExitCode:       st.ExitCode,
		DurationMillis: st.DurationMillis,
		ErrorKind:      st.ErrorKind,
		Message:        mask.Secrets(st.Message),
		StartTime:      st.StartTime,
		CompletionTime: st.CompletionTime,
		ArtifactPath:   st.ArtifactPath,
		Truncated:      st.Truncated,

		Walls:             e.Spec.Walls,
		ReadOnlyWorkspace: e.Spec.Sandbox.ReadOnlyWorkspace,
		Network:           e.Spec.Sandbox.Network.Mode,
	}
}

// RenderTrace writes the trace as text for people.
func RenderTrace(w io.Writer, t Trace) error {
	var b strings.Builder
	task := t.Task
	fmt.Fprintf(&b, "Task %s/%s\n", task.Namespace, task.Name)
	fmt.Fprintf(&b, "  Goal:   %s\n", strings.TrimSpace(indent(task.Goal, "          ")))
	fmt.Fprintf(&b, "  Mode:   %s   Phase: %s   Turn: %d   Agent: %s\n", orDash(string(task.Mode)), orDash(string(task.Phase)), task.Turn, task.Agent)
	if task.Result != "" {
		fmt.Fprintf(&b, "  Result: %s\n", strings.TrimSpace(indent(task.Result, "          ")))
	}
	if len(t.Turns) == 0 {
		b.WriteString("\nNo intents yet.\n")
	}
	for _, turn := range t.Turns {
		fmt.Fprintf(&b, "\nTurn %d\n", turn.Turn)
		for _, it := range turn.Intents {
			renderIntent(&b, it)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func renderIntent(b *strings.Builder, it IntentTrace) {
	const pad = "                 "
	line := func(label, format string, args ...any) {
		fmt.Fprintf(b, "    %-13s%s\n", label+":", indentRest(fmt.Sprintf(format, args...), pad))
	}
	fmt.Fprintf(b, "  [%d] %s  %s\n", it.Index, it.Tool, it.Name)
	line("Input", "%s", it.Input)
	if it.Reason != "" {
		line("Reason", "%s", it.Reason)
	}
	proposed := it.RequestedBy
	if p := it.ProposedBy; p != nil {
		var via []string
		for _, s := range []string{p.Provider, p.Model} {
			if s != "" {
				via = append(via, s)
			}
		}
		if len(via) > 0 {
			proposed += " via " + strings.Join(via, " ")
		}
		if p.ToolCallID != "" {
			// The model's id for the call; over MCP, the session's id.
			proposed += " (toolCallID " + p.ToolCallID + ")"
		}
	}
	line("Requested", "%s at %s", proposed, timestamp(it.CreatedAt.Time))

	if v := it.Validation; v != nil {
		if len(v.Errors) > 0 {
			line("Validation", "invalid\n%s", strings.Join(prefixAll(v.Errors, "- "), "\n"))
		} else {
			clamped := ""
			if v.TimeoutClamped {
				clamped = ", clamped to the task's maximum"
			}
			line("Validation", "valid (timeout %ds%s)", v.TimeoutSeconds, clamped)
		}
	}
	if d := it.Decision; d != nil {
		text := fmt.Sprintf("%s by %s\n%s\ncategory %s, risk %s, fingerprint %s", d.Action, d.PolicyRuleRef.WithGeneration(), d.Reason, orDash(string(d.Category)), orDash(string(d.Risk)), shortFingerprint(d.Fingerprint))
		if len(d.Parts) > 1 {
			var parts []string
			for _, p := range d.Parts {
				if p.Reason != "" {
					parts = append(parts, fmt.Sprintf("%s (%s: %s)", p.Command, p.Category, p.Reason))
					continue
				}
				parts = append(parts, fmt.Sprintf("%s (%s)", p.Command, p.Category))
			}
			text += "\nparts: " + strings.Join(parts, "; ")
		}
		for _, h := range d.NonActingHits {
			text += fmt.Sprintf("\nalso matched: %s (%s, %s)", h.PolicyRuleRef, h.Action, orDash(string(h.Enforcement)))
			if h.Limited != "" {
				text += ", limited: " + h.Limited
			}
		}
		if d.Instruction != "" {
			text += "\ninstruction to the model: " + d.Instruction
		}
		// A call that was not allowed or asked never runs: where it would have run
		// says nothing.
		if d.Action == v1.DecisionAllow || d.Action == v1.DecisionAsk {
			text += "\nwalls: " + wallsLine(d.Walls)
		}
		line("Decision", "%s", text)
	}
	if a := it.Approval; a != nil {
		text := fmt.Sprintf("%s: %s", a.Name, a.Decision)
		if a.DecidedBy != "" {
			text += " by " + a.DecidedBy
		}
		if a.DecidedAt != nil {
			text += " at " + timestamp(a.DecidedAt.Time)
		}
		if a.State != "" {
			text += fmt.Sprintf(" (state %s)", a.State)
		}
		text += fmt.Sprintf("\napprovals %s", a.Tally)
		for _, vote := range a.Votes {
			text += fmt.Sprintf("\nvote: %s %s", vote.User, vote.Decision)
			if vote.Comment != "" {
				text += fmt.Sprintf(", comment %q", vote.Comment)
			}
		}
		text += fmt.Sprintf("\nrequested %s, expires %s", timestamp(a.RequestedAt.Time), timestamp(a.ExpiresAt.Time))
		line("Approval", "%s", text)
	}
	if d := it.Decision; d != nil && d.GrantRef != nil {
		// Asked, and run on an approver's earlier grant instead of a new Approval.
		line("Approval", "Allow by %s", d.GrantRef)
	}
	if e := it.Execution; e != nil {
		text := fmt.Sprintf("%s: %s", e.Name, orDash(string(e.Phase)))
		if e.JobName != "" {
			text += ", job " + e.JobName
		}
		if e.SessionName != "" {
			text += ", session " + e.SessionName
		}
		if b := e.Background; b != nil {
			text += ", background job started " + timestamp(b.StartedAt.Time)
			if b.StoppedBy != "" {
				text += " (stopped: " + b.StoppedBy + ")"
			}
		}
		if e.ExitCode != nil {
			text += fmt.Sprintf(", exit code %d", *e.ExitCode)
		}
		if e.DurationMillis > 0 {
			text += ", " + (time.Duration(e.DurationMillis) * time.Millisecond).String()
		}
		workspace := "read-write"
		if e.ReadOnlyWorkspace {
			workspace = "read-only"
		}
		network := e.Network
		if network == "" {
			network = v1.NetworkNone
		}
		text += fmt.Sprintf("\nsandbox: workspace %s, network %s", workspace, network)
		if e.ErrorKind != "" {
			text += fmt.Sprintf("\n%s: %s", e.ErrorKind, e.Message)
		}
		if e.ArtifactPath != "" {
			text += "\nfull output: " + e.ArtifactPath + " in the workspace"
		}
		line("Execution", "%s", text)
	}
	for _, m := range it.Missing {
		line("Missing", "%s (named in the intent's status; it was deleted)", m)
	}
	if o := it.Observation; o != nil {
		executed := "nothing was executed"
		if o.Executed {
			executed = "executed"
		}
		line("Observation", "%s (%s)", o.Outcome, executed)
		if m := o.MaskedSecrets; m != nil {
			line("Secrets", "%s", mask.Redacted(int(m.Count), m.Kinds))
		}
		if rc := o.ResultCheck; rc != nil {
			line("Result rules", "%s", resultCheckText(rc, o.Instruction))
		}
		b.WriteString(indent(o.Summary, pad+"| ") + "\n")
	} else {
		line("Waiting", "%s", it.Waiting)
	}
}

// resultCheckText says what the result rules did with an output: the deciding rule,
// each effect ("output replaced by rule K/p/r", "2 matches redacted by rule
// K/p/r"), the rules that matched without acting, and a Replace's instruction.
func resultCheckText(rc *v1.ResultCheck, instruction string) string {
	text := string(rc.Action)
	if rc.PolicyRuleRef != nil {
		text += " by " + rc.PolicyRuleRef.WithGeneration()
	}
	if rc.Reason != "" {
		text += "\n" + rc.Reason
	}
	for _, e := range rc.Effects {
		text += "\n" + e
	}
	for _, h := range rc.NonActingHits {
		text += fmt.Sprintf("\nalso matched: %s (%s, %s)", h.PolicyRuleRef, h.Action, orDash(string(h.Enforcement)))
		if h.Limited != "" {
			text += ", limited: " + h.Limited
		}
	}
	if rc.Action == v1.RuleReplace && instruction != "" {
		text += "\ninstruction to the model: " + instruction
	}
	return text
}

// indentRest indents every line of s but the first.
func indentRest(s, prefix string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

func prefixAll(lines []string, prefix string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = prefix + l
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newTraceCommand(o *Options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "trace TASK",
		Short: "Show a task's timeline, rebuilt from the cluster; runs nothing",
		Long: `Show, turn by turn, every intent of a task: the tool and its input (secrets
masked), the proposer's reason, the validation, the decision (policy, rule,
generation, reason, and the walls the call runs behind: a read-only workspace and
no network for a read-only call), the approval (who decided, when, comment), the
execution (job, exit code, duration, the sandbox it ran in) and the observation the
model saw.

Everything comes from the objects in the cluster; nothing is re-evaluated or run.
-o json and -o yaml print the same as data (see docs/cli.md).`,
		Example: `  kubectl toolgate trace fix-tests -n team-a
  kubectl toolgate trace fix-tests -o json | jq '.turns[].intents[].decision.action'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c, err := o.connect()
			if err != nil {
				return err
			}
			objs, err := c.loadTask(cmd.Context(), args[0], true)
			if err != nil {
				return err
			}
			t := BuildTrace(objs.task, objs.intents, objs.approvals, objs.executions)
			if output != outputText {
				return printData(o.Streams.Out, output, t)
			}
			return RenderTrace(o.Streams.Out, t)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}
