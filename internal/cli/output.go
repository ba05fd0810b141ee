package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
)

// elsewhere says where an execution's output is when its pod log is not.
func elsewhere(exec *v1.Execution) string {
	msg := ""
	if p := exec.Status.ArtifactPath; p != "" {
		msg = fmt.Sprintf("The full output was kept in the task's workspace at %s (the model can read it with read_file).", p)
	} else {
		msg = "No copy of the full output was kept in the workspace."
	}
	return msg + fmt.Sprintf(" The head and tail are in the Execution: kubectl get execution %s -n %s -o jsonpath='{.status.output}'", exec.Name, exec.Namespace)
}

func newOutputCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "output INTENT",
		Short: "Print the full output of an intent's execution from its pod's log, or from the Execution",
		Long: `Print the full output of the intent's execution: the log of the tool container
of the Job's pod, read through the pods/log API while the pod exists. A call whose
Execution holds its whole output loses its Job and pod a minute after it finished
(the controller's --spent-job-ttl); its output is then printed from the Execution's
status, where secrets are masked. When the pod of any other call is gone, say so and
where else the output is: the workspace copy (the Execution's artifactPath) and the
head and tail kept in the Execution's status. A call that ran in a session (isolation
Session) has no log of its own: its output is printed from the Execution when it
holds all of it, else the command says where the rest is.`,
		Example: `  kubectl toolgate output fix-tests-x7k2p -n team-a > test-output.txt`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := o.connect()
			if err != nil {
				return err
			}
			// A call deleted from the cluster is read from the archive.
			intent, call, err := c.intentOrArchived(ctx, args[0])
			if err != nil {
				return err
			}
			ref := intent.Status.ExecutionName
			if ref == "" {
				why := "it has not been executed yet"
				if obs := intent.Status.Observation; obs != nil {
					why = fmt.Sprintf("it ended %s without executing", obs.Outcome)
				}
				return fmt.Errorf("ToolIntent %s has no output: %s", intent.Name, why)
			}
			exec, err := c.executionOrArchived(ctx, intent, call, ref)
			if err != nil {
				return err
			}
			if exec == nil {
				return fmt.Errorf("the Execution %s of ToolIntent %s is gone, and its Job and pod with it", ref, intent.Name)
			}
			if session := exec.Status.SessionName; session != "" {
				// A call of a session leaves no log of its own: its output came back on
				// the exec stream, into the Execution and the workspace copy.
				if executor.HoldsWholeOutput(&exec.Status) {
					_, err := io.WriteString(o.Streams.Out, exec.Status.Output)
					return err
				}
				if !executor.IsFinished(&exec.Status) && exec.Status.Background != nil {
					return fmt.Errorf("the Execution %s is a background job running in session pod %s; its output is here once it ended (job_output shows its output so far, to the task that started it)", exec.Name, session)
				}
				if !executor.IsFinished(&exec.Status) {
					return fmt.Errorf("the Execution %s runs in session pod %s (phase %s); its output is known once it finished: try again then", exec.Name, session, orDash(string(exec.Status.Phase)))
				}
				return fmt.Errorf("the Execution %s ran in session pod %s, which keeps no log of a call, and its status does not hold the whole output (cut, masked or missing). %s", exec.Name, session, elsewhere(exec))
			}
			if executor.AnsweredByController(&exec.Status) {
				// A background-job tool ran in no pod: its answer is the Execution's.
				_, err := io.WriteString(o.Streams.Out, exec.Status.Output)
				return err
			}
			pod := exec.Status.PodName
			if pod == "" {
				return fmt.Errorf("the Execution %s has no pod yet (phase %s); try again once it runs", exec.Name, orDash(string(exec.Status.Phase)))
			}
			stream, err := c.core.Pods(c.namespace).GetLogs(pod, &corev1.PodLogOptions{Container: executor.ToolContainerName}).Stream(ctx)
			if err != nil {
				if apierrors.IsNotFound(err) && executor.HoldsWholeResult(&exec.Status) {
					// A spent Job was reaped: the Execution holds all the pod had.
					fmt.Fprintf(o.Streams.ErrOut, "the pod %s was deleted once the Execution %s held the whole output; printing it from the Execution (secrets masked)\n", pod, exec.Name)
					_, err := io.WriteString(o.Streams.Out, exec.Status.Output)
					return err
				}
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("the pod %s of Job %s is gone, and its log with it. %s", pod, orDash(exec.Status.JobName), elsewhere(exec))
				}
				return fmt.Errorf("the log of pod %s could not be read: %w. %s", pod, apiError(err), elsewhere(exec))
			}
			defer func() { _ = stream.Close() }()
			if _, err := io.Copy(o.Streams.Out, stream); err != nil {
				return fmt.Errorf("reading the log of pod %s: %w", pod, err)
			}
			return nil
		},
	}
	return cmd
}
