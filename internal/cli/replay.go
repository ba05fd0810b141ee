package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/policyset"
)

// Exit codes of replay, as kubectl diff has them.
const (
	replayUnchanged = 0
	replayChanged   = 1
	replayError     = 2
)

// Verdict outcomes besides the decision actions.
const (
	// VerdictInvalid: the call fails validation.
	VerdictInvalid = "Invalid"
	// VerdictNone: nothing was recorded yet (the intent was not validated or decided).
	VerdictNone = "None"
)

// ReplayReport is what `replay --dry-run -o json` prints.
type ReplayReport struct {
	Task      string `json:"task"`
	Namespace string `json:"namespace"`
	// Policies says where the policies came from: "cluster" or the --policy file.
	Policies string `json:"policies"`
	// PolicyIDs are the policies evaluated, as Kind/name.
	PolicyIDs []string `json:"policyIDs"`
	// Broken are the cluster's policies that do not compile; while one is in scope
	// nothing is allowed without a human, as in the controller.
	Broken []string `json:"broken,omitempty"`
	// Intents in turn and index order.
	Intents []ReplayedIntent `json:"intents"`
	// Changed counts the intents whose verdict would change.
	Changed int `json:"changed"`
}

// ReplayedIntent compares the recorded verdict on one intent with today's.
type ReplayedIntent struct {
	Name  string      `json:"name"`
	Turn  int32       `json:"turn"`
	Index int32       `json:"index"`
	Tool  v1.ToolName `json:"tool"`
	// Input with secrets masked.
	Input    string  `json:"input"`
	Recorded Verdict `json:"recorded"`
	Replayed Verdict `json:"replayed"`
	// Changed is true when validity, action, deciding policy or rule differ.
	Changed bool `json:"changed"`
	// Changes says what differs, one line each.
	Changes []string `json:"changes,omitempty"`
	// Notes are differences that are not a changed decision, such as a newer
	// generation of the same rule (which changes the fingerprint an approval is bound to).
	Notes []string `json:"notes,omitempty"`
	// RecordedResult and ReplayedResult are what the result rules did with the
	// call's output when it was observed, and would do now (ReplayResults); absent
	// for a call that did not run, and when no rule matched.
	RecordedResult *v1.ResultCheck `json:"recordedResult,omitempty"`
	ReplayedResult *v1.ResultCheck `json:"replayedResult,omitempty"`
}

// Verdict is how a call fared in validation and policy.
type Verdict struct {
	// Outcome is Allow, Ask or Deny; Invalid when validation failed; None when
	// nothing was recorded yet.
	Outcome string   `json:"outcome"`
	Errors  []string `json:"errors,omitempty"`
	// PolicyRuleRef names what decided, as the decision does; absent for Invalid
	// and None.
	PolicyRuleRef *v1.PolicyRuleReference `json:"policyRuleRef,omitempty"`
	Reason        string                  `json:"reason,omitempty"`
	// Walls are the sandbox restrictions the call runs under (see Decision.Walls).
	Walls       *v1.SandboxWalls `json:"walls,omitempty"`
	Fingerprint string           `json:"fingerprint,omitempty"`
}

// Replay re-runs validation and the given policies over a task's recorded intents,
// in turn and index order, and compares each verdict with the recorded one. It runs
// nothing and writes nothing.
//
// Each intent is validated as the controller validated it: against the task, with
// the intents recorded before it counted and their recorded observations as file
// baselines. The task's own end is ignored (a finished or cancelled task accepts no
// intents, which would make every replayed call invalid and say nothing about the
// policies). An Ask is turned into a Deny as the controller does when the same call
// was already denied by a human, or the task's approval requests were used up by the
// intents before it.
func Replay(task *v1.AgentTask, intents []v1.ToolIntent, approvals []v1.Approval, policies policyset.Set) []ReplayedIntent {
	sorted := append([]v1.ToolIntent(nil), intents...)
	sort.Slice(sorted, func(i, j int) bool { return pipeline.IntentBefore(&sorted[i], &sorted[j]) })
	live := runningTask(task)
	approvalOf := map[string]*v1.Approval{}
	for i := range approvals {
		approvalOf[approvals[i].Spec.IntentRef.Name] = &approvals[i]
	}

	identity := loopIdentity(task, sorted)
	out := make([]ReplayedIntent, 0, len(sorted))
	for i := range sorted {
		in := &sorted[i]
		r := ReplayedIntent{
			Name: in.Name, Turn: in.Spec.Turn, Index: in.Spec.Index, Tool: in.Spec.Tool,
			Input:    mask.Secrets(string(in.Spec.Input.Raw)),
			Recorded: recordedVerdict(in),
			Replayed: judge(task, live, in, sorted[:i], approvalOf, policies, identity),
		}
		compare(&r)
		out = append(out, r)
	}
	return out
}

// judge validates and decides one call as the controller would have, with the
// intents in earlier recorded before it: they count against the task's budgets, their
// observations are the file baselines, their rule fires count against a rule's
// limits, and their approvals against the task's approval requests. identity is the
// agent loop's (loopIdentity), which alone proposes a model task's calls.
func judge(task, live *v1.AgentTask, in *v1.ToolIntent, earlier []v1.ToolIntent, approvalOf map[string]*v1.Approval, policies policyset.Set, identity string) Verdict {
	v := pipeline.Validate(pipeline.ValidateInput{
		Intent:             in,
		Task:               live,
		EarlierIntents:     len(earlier),
		Baselines:          pipeline.Baselines(earlier),
		ControllerIdentity: identity,
	})
	if len(v.Errors) > 0 {
		return Verdict{Outcome: VerdictInvalid, Errors: v.Errors}
	}
	d := policy.Decide(policy.Request{
		Namespace: in.Namespace,
		Task:      task.Name,
		Mode:      task.Spec.Mode,
		Tool:      in.Spec.Tool,
		Input:     v.Normalized,
		// The fires recorded before this call, at the time it was decided: a rule's
		// limits replay as they stood then.
		Fires: pipeline.FireCountsOf(pipeline.RuleFires(string(task.UID), earlier, nil)),
		Now:   pipeline.DecidedAt(in),
	}, policies.Cluster, policies.Namespaced, policies.Broken)
	var prior []v1.Approval
	for j := range earlier {
		if a, ok := approvalOf[earlier[j].Name]; ok {
			prior = append(prior, *a)
		}
	}
	pipeline.ApplyAskLimits(&d, task.Spec.Budgets.MaxApprovalRequests, prior, nil)
	return decidedVerdict(&d)
}

// loopIdentity is the user the agent loop proposed a model task's calls as, read
// from the record: the requester of an intent the task controls that the controller
// validated. The CLI cannot know the controller's identity otherwise, and without it
// every call of a model task would replay as proposed by nobody. "" for an external
// task, or a model task with no validated call yet.
func loopIdentity(task *v1.AgentTask, intents []v1.ToolIntent) string {
	if task.Spec.Agent.Model == nil {
		return ""
	}
	for i := range intents {
		in := &intents[i]
		if v := in.Status.Validation; v != nil && len(v.Errors) == 0 && metav1.IsControlledBy(in, task) {
			return in.Spec.RequestedBy
		}
	}
	return ""
}

// runningTask is the task with its end undone (and its push, which begins its
// end), so that validation judges the call and not whether the task still accepts
// calls today.
func runningTask(task *v1.AgentTask) *v1.AgentTask {
	t := task.DeepCopy()
	t.Spec.Lifecycle = v1.LifecycleActive
	meta.RemoveStatusCondition(&t.Status.Conditions, v1.ConditionSucceeded)
	meta.RemoveStatusCondition(&t.Status.Conditions, v1.ConditionFailed)
	if t.Status.Workspace != nil {
		t.Status.Workspace.Push = nil
	}
	return t
}

// decidedVerdict is the verdict of decision d.
func decidedVerdict(d *v1.Decision) Verdict {
	ref := d.PolicyRuleRef
	return Verdict{Outcome: string(d.Action), PolicyRuleRef: &ref, Reason: mask.Secrets(d.Reason), Walls: d.Walls, Fingerprint: d.Fingerprint}
}

// recordedVerdict reads the verdict the controller recorded on an intent.
func recordedVerdict(in *v1.ToolIntent) Verdict {
	if v := in.Status.Validation; v != nil && len(v.Errors) > 0 {
		return Verdict{Outcome: VerdictInvalid, Errors: v.Errors}
	}
	d := in.Status.Decision
	if d == nil {
		return Verdict{Outcome: VerdictNone}
	}
	return decidedVerdict(d)
}

// compare fills Changed, Changes and Notes.
func compare(r *ReplayedIntent) {
	rec, now := r.Recorded, r.Replayed
	if rec.Outcome == VerdictNone {
		r.Notes = append(r.Notes, "nothing recorded yet to compare with (the intent was not validated or decided)")
		return
	}
	if rec.Outcome != now.Outcome {
		r.Changes = append(r.Changes, fmt.Sprintf("%s -> %s", rec.Outcome, now.Outcome))
	}
	decided := rec.Outcome != VerdictInvalid && now.Outcome != VerdictInvalid
	if decided && rec.PolicyRuleRef != nil && now.PolicyRuleRef != nil {
		was, is := *rec.PolicyRuleRef, *now.PolicyRuleRef
		if !was.SameRule(is) {
			r.Changes = append(r.Changes, fmt.Sprintf("deciding rule %s -> %s", was, is))
		} else if was.Generation != is.Generation {
			r.Notes = append(r.Notes, fmt.Sprintf("same rule, policy generation %d -> %d: an approval given for the recorded call would not match", was.Generation, is.Generation))
		}
	}
	if decided && runs(rec.Outcome) && runs(now.Outcome) && wallsText(rec.Walls) != wallsText(now.Walls) {
		r.Notes = append(r.Notes, fmt.Sprintf("walls %s -> %s: the call would run in another sandbox, and an approval given for the recorded call would not match", wallsText(rec.Walls), wallsText(now.Walls)))
	}
	r.Changed = len(r.Changes) > 0
}

// runs says whether a call decided so would run (where it runs matters only then).
func runs(outcome string) bool {
	return outcome == string(v1.DecisionAllow) || outcome == string(v1.DecisionAsk)
}

// RenderReplay writes the report as text: every intent, the changed ones marked.
func RenderReplay(w io.Writer, rep ReplayReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Replay of task %s/%s against %s policies", rep.Namespace, rep.Task, rep.Policies)
	if len(rep.PolicyIDs) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(rep.PolicyIDs, ", "))
	}
	b.WriteString("; nothing was executed.\n")
	if len(rep.Broken) > 0 {
		fmt.Fprintf(&b, "Not Ready (do not compile): %s; while they are in scope nothing is allowed without a human.\n", strings.Join(rep.Broken, ", "))
	}
	for _, r := range rep.Intents {
		mark := "  "
		if r.Changed {
			mark = "! "
		}
		fmt.Fprintf(&b, "\n%sturn %d [%d] %s %s  %s\n", mark, r.Turn, r.Index, r.Tool, r.Name, oneLine(r.Input, 100))
		fmt.Fprintf(&b, "    recorded: %s\n", verdictText(r.Recorded))
		fmt.Fprintf(&b, "    now:      %s\n", verdictText(r.Replayed))
		if r.RecordedResult != nil || r.ReplayedResult != nil {
			fmt.Fprintf(&b, "    result recorded: %s\n", resultKey(r.RecordedResult))
			fmt.Fprintf(&b, "    result now:      %s\n", resultKey(r.ReplayedResult))
		}
		for _, c := range r.Changes {
			fmt.Fprintf(&b, "    CHANGED:  %s\n", c)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "    note:     %s\n", n)
		}
	}
	switch rep.Changed {
	case 0:
		fmt.Fprintf(&b, "\nNo decision would change (%d intents replayed).\n", len(rep.Intents))
	case 1:
		fmt.Fprintf(&b, "\n1 of %d decisions would change.\n", len(rep.Intents))
	default:
		fmt.Fprintf(&b, "\n%d of %d decisions would change.\n", rep.Changed, len(rep.Intents))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func verdictText(v Verdict) string {
	switch v.Outcome {
	case VerdictNone:
		return "nothing recorded yet"
	case VerdictInvalid:
		return "Invalid: " + strings.Join(v.Errors, "; ")
	}
	by := "no rule"
	if v.PolicyRuleRef != nil {
		by = v.PolicyRuleRef.WithGeneration()
	}
	if v.Reason == "" {
		return fmt.Sprintf("%s by %s", v.Outcome, by)
	}
	return fmt.Sprintf("%s by %s: %s", v.Outcome, by, v.Reason)
}

func newReplayCommand(o *Options) *cobra.Command {
	var (
		dryRun, model, execute bool
		policyFile             string
		output                 string
		m                      modelFlags
		include                []string
		timeout                time.Duration
	)
	cmd := &cobra.Command{
		Use:   "replay TASK --dry-run | --model | --execute",
		Short: "Replay a task's record against today's policies (--dry-run) or another model (--model), or re-run its reads on a copy of its workspace (--execute)",
		Long: `Replay a task's recorded history. --dry-run and --model execute nothing and write
nothing; --execute re-runs calls, in a throwaway task on a copy of the workspace.

--dry-run re-runs validation and the policies as they are now over every recorded
intent of the task, in turn and index order, and reports each decision that would
differ from the recorded one. It runs the result rules (when: Result) as well on
the output each call's Execution recorded, and reports where what they do (the
deciding rule, what was redacted or replaced) would differ.

--model asks a model, for each recorded turn, what it would propose given the
conversation the recorded model saw before that turn (the recorded replies and
observations, never new ones), and compares its tool calls with the recorded ones:
Same, Changed (with the fields that differ), Added, Missing, or an answer instead
of calls. Each proposed call is validated and decided by the policies; nothing runs.
The model is the task's own spec.agent.model unless --model-from names another
AgentTask whose agent.model block to use; --base-url, --model-name and
--api-key-env override single fields. The API key is read from the block's Secret
with your own credentials, or from the environment variable --api-key-env names
(never from the command line), and is masked in everything printed.
--system-prompt FILE replaces toolgate's system prompt, to try a new prompt on old
tasks. --max-tokens bounds what the replay spends (default: the task's
budgets.maxTokens).

--execute re-runs the task's recorded calls that ran and were read-only (by their
recorded decision) in a throwaway AgentTask labelled toolgate.dev/replay-of=TASK,
whose workspace is a copy of the task's (spec.workspace.copyOf), and compares each
observation with the recorded one: outcome, exit code, the output the model saw
(its hash, and both texts when they differ) and a read file's content hash. The
calls are proposed as you and decided by the policies like any call: one that asks
waits for a human's approval. --include INTENT re-runs a call that was not
read-only too (the copy is changed, never the task's workspace). The throwaway task,
its copy, intents and executions are deleted when the replay ends. You need the
rights to create AgentTasks and propose ToolIntents in the namespace.

--policy FILE evaluates the ToolPolicies and ClusterToolPolicies in FILE (YAML, one
or more documents) instead of the cluster's policies, to see what a policy change
would do before applying it.

Exit code: 0 when nothing would change, 1 when a decision (--dry-run), a turn
(--model) or an output (--execute) would, as kubectl diff; 2 on an error, a model
error included.`,
		Example: `  kubectl toolgate replay fix-tests --dry-run
  kubectl toolgate replay fix-tests --dry-run --policy tightened.yaml
  kubectl toolgate replay fix-tests --model --model-from candidate-model-task
  OPENAI_API_KEY=... kubectl toolgate replay fix-tests --model --model-name gpt-5-mini --api-key-env OPENAI_API_KEY
  kubectl toolgate replay fix-tests --execute
  kubectl toolgate replay fix-tests --execute --include fix-tests-t3-0`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			modes := 0
			for _, on := range []bool{dryRun, model, execute} {
				if on {
					modes++
				}
			}
			if modes != 1 {
				return errors.New("replay runs in one mode: --dry-run (today's policies over the recorded calls), --model (another model over the recorded conversation), or --execute (the recorded reads again, on a copy of the workspace)")
			}
			if policyFile != "" && execute {
				return errors.New("--policy is for --dry-run and --model: --execute proposes its calls to the cluster, where the cluster's policies decide them")
			}
			// A flag of another mode would be ignored: say so rather than run
			// something other than what was asked.
			on := map[string]bool{"--execute": execute, "--model": model}
			for _, f := range []struct{ flag, mode string }{{"include", "--execute"}, {"timeout", "--execute"},
				{"model-from", "--model"}, {"base-url", "--model"}, {"model-name", "--model"}, {"api-key-env", "--model"}, {"system-prompt", "--model"}, {"max-tokens", "--model"}} {
				if cmd.Flags().Changed(f.flag) && !on[f.mode] {
					return fmt.Errorf("--%s is for %s only", f.flag, f.mode)
				}
			}
			if err := checkOutput(output); err != nil {
				return err
			}
			c, err := o.connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			objs, err := c.loadTask(ctx, args[0], true)
			if err != nil {
				return err
			}
			if execute {
				return runExecutionReplay(ctx, o, c, objs, include, timeout, output)
			}
			source, loaded, err := replayPolicies(ctx, c, policyFile)
			if err != nil {
				return err
			}
			if model {
				return runModelReplay(ctx, o, c, objs, source, loaded, m, output)
			}
			rep := ReplayReport{Task: objs.task.Name, Namespace: objs.task.Namespace, Policies: source}
			for _, p := range append(append([]*policy.CompiledPolicy(nil), loaded.Cluster...), loaded.Namespaced...) {
				rep.PolicyIDs = append(rep.PolicyIDs, p.ID())
			}
			rep.Broken = loaded.Broken
			rep.Intents = Replay(objs.task, objs.intents, objs.approvals, loaded)
			ReplayResults(objs.task, objs.intents, objs.executions, loaded, rep.Intents)
			for _, r := range rep.Intents {
				if r.Changed {
					rep.Changed++
				}
			}
			if output != outputText {
				err = printData(o.Streams.Out, output, rep)
			} else {
				err = RenderReplay(o.Streams.Out, rep)
			}
			if err != nil {
				return err
			}
			if rep.Changed > 0 {
				return &ExitError{Code: replayChanged}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Re-decide the recorded calls with today's (or --policy) policies")
	cmd.Flags().BoolVar(&model, "model", false, "Ask a model for each recorded turn and compare its calls with the recorded ones")
	cmd.Flags().StringVar(&policyFile, "policy", "", "Evaluate the ToolPolicies and ClusterToolPolicies in this YAML file instead of the cluster's")
	cmd.Flags().BoolVar(&execute, "execute", false, "Re-run the recorded read-only calls on a copy of the workspace and compare their output")
	cmd.Flags().StringSliceVar(&include, "include", nil, "With --execute: also re-run these intents (by name), which were not read-only")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "With --execute: how long to wait for the workspace copy and for each call")
	m.addFlags(cmd)
	addOutputFlag(cmd, &output)
	return errorExitCode(cmd, replayError)
}

// replayPolicies loads the policies a replay decides with: the file's, or the
// cluster's. source names them for the report.
func replayPolicies(ctx context.Context, c *cluster, file string) (string, policyset.Set, error) {
	if file != "" {
		loaded, err := loadPolicyFile(file)
		return "the file " + file + "'s", loaded, err
	}
	loaded, err := policyset.NewCache().Load(ctx, c.client, c.namespace)
	if err != nil {
		return "", loaded, fmt.Errorf("reading the cluster's policies: %w", apiError(err))
	}
	return "the cluster's", loaded, nil
}
