package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tools"
)

// How a re-executed call compares with the recorded one.
const (
	// OutputSame: the same outcome, exit code, output and file content hash.
	OutputSame = "Same"
	// OutputChanged: one of them differs (Differences says which), or the call did
	// not run this time.
	OutputChanged = "Changed"
	// OutputNotReplayed: the call was not re-run (Reason says why).
	OutputNotReplayed = "NotReplayed"
)

// ExecutionReplayReport is what `replay --execute -o json` prints.
type ExecutionReplayReport struct {
	Task      string `json:"task"`
	Namespace string `json:"namespace"`
	// ReplayTask is the throwaway AgentTask the calls ran in, on a copy of the task's
	// workspace; it is deleted, with everything it owns, when the replay ends.
	ReplayTask string `json:"replayTask"`
	// Calls are the task's recorded calls in turn and index order.
	Calls []ReexecutedCall `json:"calls"`
	// Changed counts the calls whose output changed; NotReplayed those not re-run.
	Changed     int `json:"changed"`
	NotReplayed int `json:"notReplayed"`
	// Error is why the replay stopped early, if it did.
	Error string `json:"error,omitempty"`
	// Note says why nothing was re-run, when nothing was.
	Note string `json:"note,omitempty"`
}

// ReexecutedCall compares one recorded call's observation with the one it gets
// when it runs again on a copy of the workspace.
type ReexecutedCall struct {
	Name  string      `json:"name"`
	Turn  int32       `json:"turn"`
	Index int32       `json:"index"`
	Tool  v1.ToolName `json:"tool"`
	// Input with secrets masked.
	Input string `json:"input"`
	// Comparison is OutputSame, OutputChanged or OutputNotReplayed.
	Comparison string `json:"comparison"`
	// Reason says why a call was not replayed.
	Reason string `json:"reason,omitempty"`
	// ReplayIntent is the intent the call ran again as, in the replay task.
	ReplayIntent string `json:"replayIntent,omitempty"`
	// Recorded and Replayed are the two observations' facts.
	Recorded *OutputFacts `json:"recorded,omitempty"`
	Replayed *OutputFacts `json:"replayed,omitempty"`
	// Differences says what differs, one line each.
	Differences []string `json:"differences,omitempty"`
}

// OutputFacts are what an observation says about a call's output.
type OutputFacts struct {
	Outcome  v1.Outcome `json:"outcome"`
	Executed bool       `json:"executed"`
	ExitCode *int32     `json:"exitCode,omitempty"`
	// SummarySHA256 hashes the summary: the head and tail of the output the model
	// saw, with the exit code marker.
	SummarySHA256 string `json:"summarySHA256"`
	// ContentSHA256 is the file's hash after a read_file.
	ContentSHA256 string `json:"contentSHA256,omitempty"`
	// OutputSHA256 hashes the call's whole output, as its Execution recorded it
	// (the summary keeps only the head and tail of a long one); empty when the
	// Execution is gone or cannot be read.
	OutputSHA256 string `json:"outputSHA256,omitempty"`
	Truncated    bool   `json:"truncated,omitempty"`
	// Summary is the summary itself (secrets masked, as the controller stored it).
	Summary string `json:"summary"`
}

func outputFacts(o *v1.Observation) *OutputFacts {
	sum := sha256.Sum256([]byte(o.Summary))
	return &OutputFacts{Outcome: o.Outcome, Executed: o.Executed, ExitCode: o.ExitCode, SummarySHA256: hex.EncodeToString(sum[:]),
		ContentSHA256: o.ContentSHA256, Truncated: o.Truncated, Summary: o.Summary}
}

// replayPlan says, for each recorded call in order, whether it runs again: a call
// that ran and was read-only by its recorded decision does; one named in include
// does if it ran (it is proposed and decided like any call, so a call that asks is
// approved by a human again); every other call is listed with why not. Included
// names that are not calls of the task, or that never ran, are an error.
func replayPlan(intents []v1.ToolIntent, include []string) ([]ReexecutedCall, []*v1.ToolIntent, error) {
	sorted := append([]v1.ToolIntent(nil), intents...)
	sort.Slice(sorted, func(i, j int) bool { return pipeline.IntentBefore(&sorted[i], &sorted[j]) })
	named := map[string]bool{}
	for _, n := range include {
		named[n] = false
	}
	calls := make([]ReexecutedCall, len(sorted))
	rerun := make([]*v1.ToolIntent, len(sorted))
	for i := range sorted {
		in := &sorted[i]
		c := ReexecutedCall{Name: in.Name, Turn: in.Spec.Turn, Index: in.Spec.Index, Tool: in.Spec.Tool, Input: mask.Secrets(string(in.Spec.Input.Raw))}
		_, included := named[in.Name]
		if included {
			named[in.Name] = true
		}
		obs, d := in.Status.Observation, in.Status.Decision
		switch {
		case obs == nil || !obs.Executed:
			c.Comparison, c.Reason = OutputNotReplayed, "it did not run when recorded, so there is no output to compare with"
			if obs != nil {
				c.Reason = fmt.Sprintf("it did not run when recorded (%s), so there is no output to compare with", obs.Outcome)
			}
			if included {
				return nil, nil, fmt.Errorf("--include %s: %s", in.Name, c.Reason)
			}
		case isControllerTool(in.Spec.Tool):
			c.Comparison, c.Reason = OutputNotReplayed, fmt.Sprintf("%s is toolgate's own step, not a call an agent can repeat", in.Spec.Tool)
			if included {
				return nil, nil, fmt.Errorf("--include %s: %s", in.Name, c.Reason)
			}
		case included:
			c.Reason = "named with --include"
			c.Recorded = outputFacts(obs)
			rerun[i] = in
		case d != nil && d.Category == v1.CategoryReadOnly:
			c.Recorded = outputFacts(obs)
			rerun[i] = in
		default:
			category := "none recorded"
			if d != nil && d.Category != "" {
				category = string(d.Category)
			}
			c.Comparison, c.Reason = OutputNotReplayed, fmt.Sprintf("not read-only (category %s); name it with --include to re-run it, decided and approved like any call", category)
		}
		calls[i] = c
	}
	for n, found := range named {
		if !found {
			return nil, nil, fmt.Errorf("--include %s: the task has no such intent; name intents as kubectl toolgate trace lists them", n)
		}
	}
	return calls, rerun, nil
}

// compareOutputs fills Comparison and Differences from the two observations.
func compareOutputs(c *ReexecutedCall) {
	rec, now := c.Recorded, c.Replayed
	if !now.Executed {
		c.Differences = append(c.Differences, fmt.Sprintf("it did not run this time (%s): %s", now.Outcome, oneLine(now.Summary, 300)))
	} else {
		if rec.Outcome != now.Outcome {
			c.Differences = append(c.Differences, fmt.Sprintf("outcome %s -> %s", rec.Outcome, now.Outcome))
		}
		if exitText(rec.ExitCode) != exitText(now.ExitCode) {
			c.Differences = append(c.Differences, fmt.Sprintf("exit code %s -> %s", exitText(rec.ExitCode), exitText(now.ExitCode)))
		}
		switch {
		case rec.SummarySHA256 != now.SummarySHA256:
			c.Differences = append(c.Differences, fmt.Sprintf("output the model saw differs (sha256 %s -> %s)", rec.SummarySHA256[:12], now.SummarySHA256[:12]))
		case rec.OutputSHA256 != "" && now.OutputSHA256 != "" && rec.OutputSHA256 != now.OutputSHA256:
			c.Differences = append(c.Differences, fmt.Sprintf("the whole output differs beyond the head and tail the model saw (sha256 %s -> %s)", short(rec.OutputSHA256), short(now.OutputSHA256)))
		}
		if rec.ContentSHA256 != now.ContentSHA256 {
			c.Differences = append(c.Differences, fmt.Sprintf("file content sha256 %s -> %s", orDash(short(rec.ContentSHA256)), orDash(short(now.ContentSHA256))))
		}
	}
	c.Comparison = OutputSame
	if len(c.Differences) > 0 {
		c.Comparison = OutputChanged
	}
}

func exitText(code *int32) string {
	if code == nil {
		return "none"
	}
	return fmt.Sprint(*code)
}

// replayTaskFor is the throwaway task an execution replay runs in: the task's mode,
// tools, sandbox and budgets, an external agent whose one proposer is user, and a
// claim of its own seeded with a copy of the task's workspace. It is labelled with
// v1.LabelReplayOf, and its goal says what it is to anyone who lists tasks meanwhile.
func replayTaskFor(task *v1.AgentTask, user string, calls int, storage *v1.WorkspaceVolumeClaim) *v1.AgentTask {
	budgets := task.Spec.Budgets
	if budgets.MaxIntents > 0 && budgets.MaxIntents < int32(calls) {
		budgets.MaxIntents = int32(calls)
	}
	return &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{
			// Room for the API server's five characters and the intents' suffixes.
			GenerateName: clip.Bytes(task.Name, 200) + "-replay-",
			Namespace:    task.Namespace,
			Labels:       map[string]string{v1.LabelReplayOf: executor.LabelValue(task.Name)},
		},
		Spec: v1.AgentTaskSpec{
			Goal: fmt.Sprintf("Execution replay of AgentTask %s (kubectl toolgate replay --execute by %s): re-runs %d of its recorded calls on a copy of its workspace and compares their output. Removed when the replay ends.",
				task.Name, user, calls),
			Mode:    task.Spec.Mode,
			Tools:   task.Spec.Tools,
			Sandbox: task.Spec.Sandbox,
			Budgets: budgets,
			Workspace: v1.WorkspaceSpec{
				VolumeClaim: storage,
				CopyOf:      &v1.WorkspaceCopy{TaskRef: v1.LocalObjectReference{Name: task.Name}},
			},
			Agent: v1.AgentSpec{External: &v1.ExternalAgent{
				Description: "kubectl toolgate replay --execute",
				Proposers:   v1.Proposers{Users: []string{user}},
			}},
		},
	}
}

// replayStorage is the claim the copy goes into: the size and class of the task's
// own claim when toolgate made it; else the default.
func replayStorage(task *v1.AgentTask) *v1.WorkspaceVolumeClaim {
	if vc := task.Spec.Workspace.VolumeClaim; vc != nil {
		return vc.DeepCopy()
	}
	return &v1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")}
}

// executionReplay is replay --execute: it creates the replay task, waits for its
// copy of the workspace, proposes each call that runs again in recorded order and
// waits for its observation, and deletes the replay task (and with it every object
// the replay made) however the replay ends.
func executionReplay(ctx context.Context, c *cluster, task *v1.AgentTask, intents []v1.ToolIntent, include []string, timeout time.Duration, progress io.Writer) (ExecutionReplayReport, error) {
	rep := ExecutionReplayReport{Task: task.Name, Namespace: task.Namespace}
	calls, rerun, err := replayPlan(intents, include)
	if err != nil {
		return rep, err
	}
	rep.Calls = calls
	count := 0
	for _, in := range rerun {
		if in != nil {
			count++
		}
	}
	for _, c := range calls {
		if c.Comparison == OutputNotReplayed {
			rep.NotReplayed++
		}
	}
	if count == 0 {
		rep.Note = "no recorded call of the task ran read-only, and none was named with --include: nothing was re-run and no replay task was made"
		return rep, nil
	}
	user, _, err := c.whoAmIWithGroups(ctx)
	if err != nil {
		return rep, err
	}
	replay := replayTaskFor(task, user, count, replayStorage(task))
	if err := c.client.Create(ctx, replay); err != nil {
		return rep, fmt.Errorf("creating the replay task: %w", apiError(err))
	}
	rep.ReplayTask = replay.Name
	fmt.Fprintf(progress, "agenttask/%s created: a copy of %s's workspace, where %d recorded call(s) run again\n", replay.Name, task.Name, count)
	defer func() {
		// Removed whatever happened, even when the command is interrupted.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err := c.client.Delete(cleanup, replay, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if client.IgnoreNotFound(err) != nil {
			fmt.Fprintf(progress, "could not delete the replay task %s: %v; delete it with: kubectl delete agenttask -n %s %s\n", replay.Name, apiError(err), replay.Namespace, replay.Name)
			return
		}
		fmt.Fprintf(progress, "agenttask/%s deleted, with its workspace copy, intents and executions\n", replay.Name)
	}()

	if err := waitForReady(ctx, c, replay, timeout, progress); err != nil {
		rep.Error = err.Error()
		return rep, nil
	}
	for i, in := range rerun {
		if in != nil {
			rep.Calls[i].Recorded.OutputSHA256 = outputHash(ctx, c, in)
		}
	}
	var proposed []v1.ToolIntent
	for i, in := range rerun {
		if in == nil {
			continue
		}
		call := &rep.Calls[i]
		intent := pipeline.Proposal(replay, proposed, in.Spec.Tool, in.Spec.Input.Raw,
			fmt.Sprintf("execution replay of %s (turn %d, index %d) of AgentTask %s", in.Name, in.Spec.Turn, in.Spec.Index, task.Name), user, nil, v1.ProposedBy{Provider: proposer})
		intent.Labels = map[string]string{v1.LabelReplayOf: executor.LabelValue(task.Name)}
		if err := c.client.Create(ctx, intent); err != nil {
			rep.Error = fmt.Sprintf("proposing %s again: %v", in.Name, apiError(err))
			return rep, nil
		}
		proposed = append(proposed, *intent)
		call.ReplayIntent = intent.Name
		fmt.Fprintf(progress, "re-running %s as %s\n", in.Name, intent.Name)
		obs, err := waitForObservation(ctx, c, intent, timeout, progress)
		if err != nil {
			rep.Error = fmt.Sprintf("%s: %v", in.Name, err)
			return rep, nil
		}
		call.Replayed = outputFacts(obs)
		call.Replayed.OutputSHA256 = outputHash(ctx, c, intent)
		compareOutputs(call)
		if call.Comparison == OutputChanged {
			rep.Changed++
		}
	}
	return rep, nil
}

// outputHash is the hash of the whole output of the intent's Execution, or "" when
// there is none to read (the comparison then rests on the summary).
func outputHash(ctx context.Context, c *cluster, intent *v1.ToolIntent) string {
	exec := &v1.Execution{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: pipeline.ExecutionName(intent)}, exec); err != nil {
		return ""
	}
	return exec.Status.OutputSHA256
}

// waitForReady waits until the replay task's workspace copy is made (Ready=True),
// and fails with the task's own message when it fails or the wait times out.
func waitForReady(ctx context.Context, c *cluster, task *v1.AgentTask, timeout time.Duration, progress io.Writer) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, waitInterval, timeout, true, func(ctx context.Context) (bool, error) {
		current := &v1.AgentTask{}
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(task), current); err != nil {
			return false, apiError(err)
		}
		if f := meta.FindStatusCondition(current.Status.Conditions, v1.ConditionFailed); f != nil && f.Status == metav1.ConditionTrue {
			return false, fmt.Errorf("the replay task %s failed before any call ran: %s: %s", task.Name, f.Reason, mask.Secrets(f.Message))
		}
		r := meta.FindStatusCondition(current.Status.Conditions, v1.ConditionReady)
		if r != nil && r.Status == metav1.ConditionTrue {
			return true, nil
		}
		if r != nil && r.Message != last {
			last = r.Message
			fmt.Fprintf(progress, "waiting for the workspace copy: %s\n", mask.Secrets(r.Message))
		}
		return false, nil
	})
	if err != nil && wait.Interrupted(err) {
		return fmt.Errorf("the replay task %s was not Ready within %s (%s)", task.Name, timeout, orDash(last))
	}
	return err
}

// RenderExecutionReplay writes the report as text: every call, the changed ones
// marked, with both outputs.
func RenderExecutionReplay(w io.Writer, rep ExecutionReplayReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Execution replay of task %s/%s", rep.Namespace, rep.Task)
	if rep.ReplayTask != "" {
		fmt.Fprintf(&b, " in the throwaway task %s, on a copy of its workspace (now deleted)", rep.ReplayTask)
	}
	b.WriteString("; the task's own workspace and intents were not touched.\n")
	for _, c := range rep.Calls {
		mark := "  "
		if c.Comparison == OutputChanged {
			mark = "! "
		}
		fmt.Fprintf(&b, "\n%sturn %d [%d] %s %s  %s\n", mark, c.Turn, c.Index, c.Tool, c.Name, oneLine(c.Input, 100))
		switch {
		case c.Comparison == OutputNotReplayed:
			fmt.Fprintf(&b, "    not replayed: %s\n", c.Reason)
			continue
		case c.Replayed == nil:
			fmt.Fprintf(&b, "    not reached: the replay stopped before this call\n")
			continue
		}
		fmt.Fprintf(&b, "    %s (as %s)\n", c.Comparison, c.ReplayIntent)
		for _, d := range c.Differences {
			fmt.Fprintf(&b, "    CHANGED:  %s\n", d)
		}
		if c.Comparison == OutputChanged {
			fmt.Fprintf(&b, "    recorded output:\n      %s\n", indentRest(headLines(c.Recorded.Summary, 20), "      "))
			fmt.Fprintf(&b, "    output now:\n      %s\n", indentRest(headLines(c.Replayed.Summary, 20), "      "))
		}
	}
	if rep.Error != "" {
		fmt.Fprintf(&b, "\nThe replay stopped: %s\n", rep.Error)
	}
	if rep.Note != "" {
		fmt.Fprintf(&b, "\n%s\n", rep.Note)
	}
	ran := 0 // re-run and observed: a replay that stopped early did not reach the rest
	for _, c := range rep.Calls {
		if c.Replayed != nil {
			ran++
		}
	}
	fmt.Fprintf(&b, "\n%d of %d re-run call(s) changed; %d call(s) not replayed.\n", rep.Changed, ran, rep.NotReplayed)
	_, err := io.WriteString(w, b.String())
	return err
}

// headLines keeps the first n lines of s and says how many it left out.
func headLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n[... %d more lines]", len(lines)-n)
}

// isControllerTool says whether toolgate itself proposes the tool (git_push): no
// agent can propose it again.
func isControllerTool(name v1.ToolName) bool {
	t, known := tools.Lookup(name)
	return known && t.ControllerTool
}

// runExecutionReplay is replay --execute.
func runExecutionReplay(ctx context.Context, o *Options, c *cluster, objs *taskObjects, include []string, timeout time.Duration, output string) error {
	rep, err := executionReplay(ctx, c, objs.task, objs.intents, include, timeout, o.Streams.ErrOut)
	if err != nil {
		return err
	}
	if output != outputText {
		err = printData(o.Streams.Out, output, rep)
	} else {
		err = RenderExecutionReplay(o.Streams.Out, rep)
	}
	switch {
	case err != nil:
		return err
	case rep.Error != "":
		return &ExitError{Code: replayError, Err: fmt.Errorf("the execution replay stopped: %s", rep.Error)}
	case rep.Changed > 0:
		return &ExitError{Code: replayChanged}
	}
	return nil
}
