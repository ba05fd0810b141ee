package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// annotationErrorExitCode names, on a command, the exit code its errors get. Commands
// whose exit code carries a result (replay, policy check) use it so that an error
// cannot be mistaken for a result.
const annotationErrorExitCode = "toolgate.dev/error-exit-code"

// ExitError ends a command with a specific exit code. Err, when set, is printed as
// the error; a nil Err means the command already said everything on its output.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit code %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Options is what every command shares: the streams, the kubectl connection flags
// (--kubeconfig, --context, --namespace, ...) and the clock.
type Options struct {
	Streams genericiooptions.IOStreams
	Flags   *genericclioptions.ConfigFlags
	// Now is the clock; tests fix it.
	Now func() time.Time
}

// NewRootCommand builds `kubectl toolgate` with all its subcommands.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{
		Streams: streams,
		Flags:   genericclioptions.NewConfigFlags(true),
		Now:     time.Now,
	}
	root := &cobra.Command{
		Use:   "toolgate",
		Short: "Trace, replay, approve and propose the tool calls toolgate governs",
		Long: `kubectl toolgate works with the objects toolgate keeps in the cluster:
AgentTasks, ToolIntents, Approvals, Executions and ToolPolicies.

  trace TASK               the timeline of a task, rebuilt from the cluster
  replay TASK --dry-run    what today's validation and policies would decide
  approvals                pending approvals, oldest first
  approve|deny APPROVAL    decide an approval as yourself
  propose TASK --tool ...  propose a tool call for a task
  output INTENT            the full output of an intent's execution
  diff TASK                the agent's change to a git workspace
  export TASK -o patch     that change as a patch git am applies
  policy check             decide a command against a policy file, offline
  audit verify TASK        check the hash chain of a task's archived records
  console                  a web console on 127.0.0.1: approvals live, decide, browse traces
  version                  the plugin's version and the controller's

trace, replay and output read a call deleted from the cluster from its archive
(archive.toolgate.dev, docs/archive.md), with your own credentials.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl toolgate"},
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.Flags.AddFlags(root.PersistentFlags())
	root.AddCommand(
		newTraceCommand(o),
		newReplayCommand(o),
		newApprovalsCommand(o),
		newDecideCommand(o, true),
		newDecideCommand(o, false),
		newProposeCommand(o),
		newOutputCommand(o),
		newDiffCommand(o),
		newExportCommand(o),
		newPolicyCommand(o),
		newAuditCommand(o),
		newConsoleCommand(o),
		newVersionCommand(o),
	)
	return root
}

// Execute runs the command line args and returns the process's exit code. Errors
// are printed as `error: ...` on streams.ErrOut, as kubectl does.
func Execute(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	root := NewRootCommand(streams)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	code := 1
	if cmd != nil {
		if s, ok := cmd.Annotations[annotationErrorExitCode]; ok {
			if n, convErr := strconv.Atoi(s); convErr == nil {
				code = n
			}
		}
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		code = exit.Code
		if exit.Err == nil {
			return code
		}
	}
	fmt.Fprintf(streams.ErrOut, "error: %s\n", err)
	return code
}

// errorExitCode marks cmd so that its errors exit with code.
func errorExitCode(cmd *cobra.Command, code int) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[annotationErrorExitCode] = strconv.Itoa(code)
	return cmd
}
