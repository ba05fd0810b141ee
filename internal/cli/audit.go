package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archiveapi"
)

// Exit codes of audit verify: 0 the chain holds, 1 it breaks, 2 it could not be
// checked (an error), so that a script tells a tampered archive from a failed read.
const (
	auditBroken = 1
	auditError  = 2
)

func newAuditCommand(o *Options) *cobra.Command {
	audit := &cobra.Command{
		Use:   "audit",
		Short: "Check the archive's record of a task",
	}
	verify := &cobra.Command{
		Use:   "verify TASK",
		Short: "Walk the hash chain of a task's archived records and say whether it holds",
		Long: `Walk the hash chain of the task's records in the archive (its calls, then the
task), recomputing each record's SHA-256 from its content and the record before it,
through the archive's API (archive.toolgate.dev) with your own credentials.

Prints OK with the number of records and the hash of the last one (keep it: an
outside copy of it is what shows that the records before it were not rewritten),
or the record where the chain breaks and why. The task is the cluster's while it
exists (a running task's calls are checked), else the newest archived task of the
name.

Exit code: 0 when the chain holds, 1 when it breaks, 2 on an error.`,
		Example: `  kubectl toolgate audit verify fix-tests -n team-a`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, name := cmd.Context(), args[0]
			c, err := o.connect()
			if err != nil {
				return err
			}
			if ok, err := c.archive.available(ctx); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("the archive's API (%s) is not installed in this cluster: there is no archive to verify (docs/archive.md)", archiveapi.GroupVersion)
			}
			params := map[string]string{}
			task := &v1.AgentTask{}
			switch err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, task); {
			case err == nil:
				params["taskUID"] = string(task.UID)
			case !apierrors.IsNotFound(err):
				return apiError(err)
			}
			var v archiveapi.TaskVerification
			found, err := c.archive.get(ctx, &v, params, archiveapi.Tasks, name, archiveapi.Verify)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("nothing of AgentTask %q in namespace %q is in the archive", name, c.namespace)
			}
			if b := v.Break; b != nil || !v.Intact {
				if b == nil {
					return errors.New("the archive says the chain does not hold, without saying where")
				}
				fmt.Fprintf(o.Streams.Out, "BROKEN: the chain of AgentTask %s/%s (UID %s) breaks at record %d (%s), after %d records that hold: %s\n",
					c.namespace, name, v.TaskUID, b.Seq, b.Name, v.Records, b.Problem)
				return &ExitError{Code: auditBroken}
			}
			_, err = fmt.Fprintf(o.Streams.Out, "OK: the chain of AgentTask %s/%s (UID %s) holds: %d records, the last hashed %s\n",
				c.namespace, name, v.TaskUID, v.Records, v.LastSHA256)
			return err
		},
	}
	audit.AddCommand(errorExitCode(verify, auditError))
	return audit
}
