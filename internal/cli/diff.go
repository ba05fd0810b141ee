package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// changeOptions are the flags diff and export share.
type changeOptions struct {
	recorded bool
	timeout  time.Duration
}

func (c *changeOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&c.recorded, "recorded", false, "Print the change last recorded instead of asking for a new read (needs no right to patch the task).")
	cmd.Flags().DurationVar(&c.timeout, "timeout", 2*time.Minute, "How long to wait for the controller to read the change.")
}

func newDiffCommand(o *Options) *cobra.Command {
	var co changeOptions
	var raw bool
	cmd := &cobra.Command{
		Use:   "diff TASK",
		Short: "Print the change an agent made to a git workspace, against the commit it was cloned at",
		Long: `Print the workspace's change against the commit spec.workspace.git was cloned at,
untracked files included and the workspace's .toolgate/ folder left out, as a git diff.
The controller reads it in a pod of its own (the claim mounted read-only, no network,
no credentials): this command asks for a read by setting the task's
toolgate.dev/change-request annotation, and prints the diff the controller recorded in
the ConfigMap TASK-change. Works while the task runs and after it ended. A summary
(files, the tree's hash, skipped paths, binary files) goes to stderr.

While the task's push (spec.workspace.git.push) is pending, it prints the push's own
record instead, ConfigMap TASK-git-push, without a new read: the change and tree the
push pushes, and no other. Its tree is the one the push's Approval names.

The agent wrote the files: their control characters (escape sequences, carriage
returns, bidirectional overrides) would let it rewrite what a terminal shows, so they
are printed escaped (\x1b, \u202e). --raw prints the bytes as recorded; export -o
patch always does.`,
		Example: `  kubectl toolgate diff fix-tests
  kubectl toolgate diff fix-tests --recorded   # the last read, without a new one`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			shown, err := readChange(cmd.Context(), o, args[0], co)
			if err != nil {
				return err
			}
			summarize(cmd.ErrOrStderr(), shown)
			diff := shown.diff
			if !raw {
				diff = mask.Escape(diff)
			}
			_, err = io.WriteString(cmd.OutOrStdout(), diff)
			return err
		},
	}
	co.addFlags(cmd)
	cmd.Flags().BoolVar(&raw, "raw", false, "Print the diff's bytes as recorded, control characters included (for a file or a pipe, not a terminal).")
	return cmd
}

func newExportCommand(o *Options) *cobra.Command {
	var co changeOptions
	var format string
	cmd := &cobra.Command{
		Use:   "export TASK -o patch",
		Short: "Write an agent's change to a git workspace as a patch that git am applies",
		Long: `Write the workspace's change (as kubectl toolgate diff reads it) as one mail in the
format git am reads: the task's goal is the commit message (its first line the
subject), the author "AgentTask NAMESPACE/NAME". Apply it to a clone at the commit the
task started from (status.workspace.commit):

  git checkout COMMIT && git am change.patch

Binary files are named in the patch but their content is not carried; the summary on
stderr lists them.`,
		Example: `  kubectl toolgate export fix-tests -o patch > change.patch`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "patch" {
				return fmt.Errorf("-o %q: the one format is patch (git am)", format)
			}
			shown, err := readChange(cmd.Context(), o, args[0], co)
			if err != nil {
				return err
			}
			summarize(cmd.ErrOrStderr(), shown)
			rec, task := shown.rec, shown.task
			if rec.FileCount == 0 {
				return fmt.Errorf("AgentTask %s made no change to its workspace: there is nothing to export", task.Name)
			}
			mail := gitws.Mail(gitws.Change{Diff: shown.diff}, rec.Tree, "AgentTask "+task.Namespace+"/"+task.Name, "toolgate@"+task.Namespace+".invalid", task.Spec.Goal, rec.RecordedAt)
			_, err = io.WriteString(cmd.OutOrStdout(), mail)
			return err
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format: patch.")
	co.addFlags(cmd)
	return cmd
}

// shownChange is a recorded change as diff and export show it.
type shownChange struct {
	rec  gitws.Record
	diff string
	task *v1.AgentTask
	// push is the pending push whose own record this is, "" for a read of the
	// workspace.
	push string
}

// readChange asks the controller for a read of the task's change (unless
// --recorded) and returns the record and the diff; while the task's push is
// pending, the push's own record.
func readChange(ctx context.Context, o *Options, name string, co changeOptions) (shownChange, error) {
	c, err := o.connect()
	if err != nil {
		return shownChange{}, err
	}
	task := &v1.AgentTask{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, task); err != nil {
		if apierrors.IsNotFound(err) {
			return shownChange{}, fmt.Errorf("AgentTask %q not found in namespace %q", name, c.namespace)
		}
		return shownChange{}, apiError(err)
	}
	if task.Spec.Workspace.Git == nil {
		return shownChange{}, fmt.Errorf("AgentTask %s has no spec.workspace.git: its workspace has no commit to compare with", name)
	}
	if task.Status.Workspace == nil || task.Status.Workspace.Commit == "" {
		why := ""
		for _, cond := range task.Status.Conditions {
			if cond.Type == v1.ConditionReady && cond.Message != "" {
				why = fmt.Sprintf(" (%s: %s)", cond.Reason, cond.Message)
			}
		}
		return shownChange{}, fmt.Errorf("AgentTask %s has not cloned its workspace yet%s", name, why)
	}
	if pushing, _ := pipeline.PushPending(task); pushing {
		// A new read would show the worktree as it is now, which is not what the
		// push pushes: that is its record, read once when the push was prepared.
		return readPushRecord(ctx, c, task, co.timeout)
	}
	key := client.ObjectKey{Namespace: c.namespace, Name: gitws.ChangeConfigMapName(name)}
	want := ""
	if !co.recorded {
		var nonce [8]byte
		_, _ = rand.Read(nonce[:])
		want = time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(nonce[:])
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1.AnnotationChangeRequest: want}}})
		if err := c.client.Patch(ctx, task, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return shownChange{}, fmt.Errorf("asking for a read of the change (patching AgentTask %s's %s annotation): %w; with no right to patch the task, --recorded prints the last read", name, v1.AnnotationChangeRequest, apiError(err))
		}
	}
	deadline := time.Now().Add(co.timeout)
	for {
		cm := &corev1.ConfigMap{}
		err := c.client.Get(ctx, key, cm)
		switch {
		case err == nil && (want == "" || cm.Annotations[v1.AnnotationChangeRequest] == want):
			return parseRecord(cm, task)
		case err == nil, apierrors.IsNotFound(err):
			if want == "" {
				return shownChange{}, fmt.Errorf("AgentTask %s has no recorded change yet (ConfigMap %s): run without --recorded to ask for one", name, key.Name)
			}
		default:
			return shownChange{}, apiError(err)
		}
		if time.Now().After(deadline) {
			return shownChange{}, fmt.Errorf("the controller did not record the change within %s (ConfigMap %s, request %s): the task's events say why (kubectl describe agenttask %s -n %s), its change pod is labelled toolgate.dev/git=change", co.timeout, key.Name, want, name, c.namespace)
		}
		if err := pause(ctx); err != nil {
			return shownChange{}, err
		}
	}
}

// readPushRecord waits for the record of the task's pending push (the controller
// writes it once nothing of the task runs any more) and returns it.
func readPushRecord(ctx context.Context, c *cluster, task *v1.AgentTask, timeout time.Duration) (shownChange, error) {
	key := client.ObjectKey{Namespace: task.Namespace, Name: pipeline.PushRecordName(task.Name)}
	deadline := time.Now().Add(timeout)
	for {
		cm := &corev1.ConfigMap{}
		err := c.client.Get(ctx, key, cm)
		switch {
		case err == nil:
			shown, err := parseRecord(cm, task)
			shown.push = pipeline.PushIntentName(task.Name)
			return shown, err
		case !apierrors.IsNotFound(err):
			return shownChange{}, fmt.Errorf("reading ConfigMap %s, the record of AgentTask %s's pending push: %w", key.Name, task.Name, apiError(err))
		}
		if time.Now().After(deadline) {
			why := ""
			if ws := task.Status.Workspace; ws != nil && ws.Push != nil && ws.Push.Message != "" {
				why = " (status.workspace.push: " + ws.Push.Message + ")"
			}
			if ws := task.Status.Workspace; ws != nil && ws.Push != nil && ws.Push.IntentName != "" {
				return shownChange{}, fmt.Errorf("ConfigMap %s, the record of the change ToolIntent %s pushes, does not exist: it was deleted, so the change cannot be shown; compare the tree the push's Approval names with the workspace yourself, or deny it", key.Name, ws.Push.IntentName)
			}
			return shownChange{}, fmt.Errorf("AgentTask %s is preparing its push, and its change was not recorded within %s (ConfigMap %s)%s", task.Name, timeout, key.Name, why)
		}
		if err := pause(ctx); err != nil {
			return shownChange{}, err
		}
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(task), task); err != nil {
			return shownChange{}, apiError(err)
		}
	}
}

// pause waits before the next look at a record, or until ctx ends.
func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(500 * time.Millisecond):
		return nil
	}
}

// parseRecord reads a change ConfigMap, refusing one the task does not control.
// A record that holds no diff (the read failed, or the diff is too large for a
// ConfigMap) is returned with an error that says why.
func parseRecord(cm *corev1.ConfigMap, task *v1.AgentTask) (shownChange, error) {
	owner := metav1.GetControllerOf(cm)
	if owner == nil || owner.UID != task.UID || owner.Kind != "AgentTask" {
		return shownChange{}, fmt.Errorf("ConfigMap %s is not AgentTask %s's change record (its controller is not the task): it is not shown", cm.Name, task.Name)
	}
	var rec gitws.Record
	if err := json.Unmarshal([]byte(cm.Data[gitws.RecordKey]), &rec); err != nil {
		return shownChange{}, fmt.Errorf("ConfigMap %s holds no readable change record: %v", cm.Name, err)
	}
	shown := shownChange{rec: rec, task: task}
	if rec.Kind != "" {
		return shown, fmt.Errorf("the change of AgentTask %s could not be read (%s): %s", task.Name, rec.Kind, rec.Message)
	}
	if !rec.Complete {
		return shown, fmt.Errorf("the change of AgentTask %s (tree %s) is not in its record: %s", task.Name, rec.Tree, rec.Message)
	}
	shown.diff = cm.Data[gitws.DiffKey]
	return shown, nil
}

// summarize says on w what the change is: its files, its tree (what a push of it
// would push), and whose record it is.
func summarize(w io.Writer, s shownChange) {
	rec := s.rec
	fmt.Fprintf(w, "AgentTask %s: %d file(s) changed against %s (%s), read %s\n", s.task.Name, rec.FileCount, short(rec.Base), s.task.Spec.Workspace.Git.URL, rec.RecordedAt.Format(time.RFC3339))
	fmt.Fprintf(w, "  tree %s\n", rec.Tree)
	if s.push != "" {
		branch := s.task.Spec.Workspace.Git.Push.Branch
		if ws := s.task.Status.Workspace; ws != nil && ws.Push != nil && ws.Push.Branch != "" {
			branch = ws.Push.Branch
		}
		fmt.Fprintf(w, "  pending push: ToolIntent %s pushes this tree, and no other, to branch %s; this is its record (ConfigMap %s, written once), not a new read of the workspace\n",
			s.push, branch, pipeline.PushRecordName(s.task.Name))
	}
	if len(rec.Binary) > 0 {
		fmt.Fprintf(w, "  binary, named but not carried in a patch: %s\n", mask.Escape(strings.Join(rec.Binary, ", ")))
	}
	if len(rec.Skipped) > 0 {
		fmt.Fprintf(w, "  left out of the change: %s\n", mask.Escape(strings.Join(rec.Skipped, ", ")))
	}
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
