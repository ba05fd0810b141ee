package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// proposer is recorded in spec.proposedBy.provider of intents this command creates.
const proposer = "kubectl-toolgate"

// waitInterval is how often propose --wait looks at the intent.
const waitInterval = 250 * time.Millisecond

// parseInput checks that --input is one JSON object; the tool's schema is checked by
// the controller, which records a failure as the intent's observation.
func parseInput(s string) (json.RawMessage, error) {
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil {
		return nil, fmt.Errorf(`--input must be a JSON object such as '{"command":"npm test"}': %w`, err)
	}
	return json.RawMessage(s), nil
}

// RenderObservation writes an observation for people.
func RenderObservation(w io.Writer, intent string, obs *v1.Observation) error {
	executed := "nothing was executed"
	if obs.Executed {
		executed = "executed"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Observation of %s: %s (%s)\n", intent, obs.Outcome, executed)
	if obs.Artifact != "" {
		fmt.Fprintf(&b, "Full output: %s\n", obs.Artifact)
	}
	b.WriteString(strings.TrimRight(obs.Summary, "\n") + "\n")
	if obs.Instruction != "" {
		fmt.Fprintf(&b, "Instruction from the policy:\n%s\n", obs.Instruction)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func newProposeCommand(o *Options) *cobra.Command {
	var (
		tool, input, reason string
		waitFor             bool
		timeout             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "propose TASK --tool TOOL --input JSON [--reason TEXT] [--wait [--timeout 10m]]",
		Short: "Propose a tool call for a task, as yourself",
		Long: `Create a ToolIntent for a task: in the task's current turn (status.turn), at the
next free index of that turn, with spec.requestedBy set to your user name as the API
server knows it (SelfSubjectReview) and spec.requestedByGroups to those of your groups
that the task names in spec.agent.external.proposers.groups. toolgate then validates
(you must be one of the task's proposers), decides, asks for approval when needed and
executes it like any other call.

With --wait the command waits for the intent's observation and prints it. Exit code
with --wait: 0 when the call Succeeded, 1 for any other outcome or when the wait
timed out.`,
		Example: `  kubectl toolgate propose fix-tests --tool bash --input '{"command":"npm test"}' --reason "run the tests" --wait
  kubectl toolgate propose fix-tests --tool read_file --input '{"path":"package.json"}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tool == "" {
				return errors.New("--tool is required, for example --tool bash")
			}
			raw, err := parseInput(input)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := o.connect()
			if err != nil {
				return err
			}
			objs, err := c.loadTask(ctx, args[0], false)
			if err != nil {
				return err
			}
			user, groups, err := c.whoAmIWithGroups(ctx)
			if err != nil {
				return err
			}
			intent := pipeline.Proposal(objs.task, objs.intents, v1.ToolName(tool), raw, reason, user, groups, v1.ProposedBy{Provider: proposer})
			if err := c.client.Create(ctx, intent); err != nil {
				return fmt.Errorf("creating the ToolIntent: %w", apiError(err))
			}
			as := user
			if len(intent.Spec.RequestedByGroups) > 0 {
				as += " as a member of " + strings.Join(intent.Spec.RequestedByGroups, ", ")
			}
			fmt.Fprintf(o.Streams.Out, "toolintent/%s created (task %s, turn %d, index %d, requested by %s)\n",
				intent.Name, objs.task.Name, intent.Spec.Turn, intent.Spec.Index, as)
			if !waitFor {
				return nil
			}
			obs, err := waitForObservation(ctx, c, intent, timeout, o.Streams.ErrOut)
			if err != nil {
				return err
			}
			if err := RenderObservation(o.Streams.Out, intent.Name, obs); err != nil {
				return err
			}
			if obs.Outcome != v1.OutcomeSucceeded {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&tool, "tool", "", "Tool to call, for example bash or read_file")
	cmd.Flags().StringVar(&input, "input", "{}", "The tool's input as a JSON object")
	cmd.Flags().StringVar(&reason, "reason", "", "Why the call is proposed; shown to approvers, never used to decide")
	cmd.Flags().BoolVar(&waitFor, "wait", false, "Wait for the observation and print it")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "How long --wait waits")
	return cmd
}

// waitForObservation polls the intent until its observation is written, telling
// progress on the way (for example that it waits for an approval, and which).
func waitForObservation(ctx context.Context, c *cluster, intent *v1.ToolIntent, timeout time.Duration, progress io.Writer) (*v1.Observation, error) {
	var (
		obs       *v1.Observation
		lastState string
	)
	key := client.ObjectKeyFromObject(intent)
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, waitInterval, timeout, true, func(ctx context.Context) (bool, error) {
		current := &v1.ToolIntent{}
		if err := c.client.Get(ctx, key, current); err != nil {
			return false, apiError(err)
		}
		if current.Status.Observation != nil {
			obs = current.Status.Observation
			return true, nil
		}
		if state := pipeline.WaitingFor(current); state != lastState {
			lastState = state
			note := ""
			if ref := current.Status.ApprovalName; ref != "" {
				note = fmt.Sprintf(" (decide it with: kubectl toolgate approve %s -n %s)", ref, current.Namespace)
			}
			fmt.Fprintf(progress, "waiting: %s%s\n", mask.Secrets(state), note)
		}
		return false, nil
	})
	if err != nil {
		// At the deadline the poll ends either as interrupted or with the error of a
		// request cut short by it; both mean the wait timed out.
		if ctx.Err() == nil && (wait.Interrupted(err) || time.Since(start) >= timeout) {
			return nil, fmt.Errorf("no observation for %s after %s; last state: %s. Follow it with: kubectl toolgate trace %s -n %s",
				intent.Name, timeout, orDash(lastState), intent.Spec.TaskRef.Name, intent.Namespace)
		}
		return nil, err
	}
	return obs, nil
}
