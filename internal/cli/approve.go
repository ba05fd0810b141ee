package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tools"
)

// PendingApproval is one row of `approvals -o json`.
type PendingApproval struct {
	Namespace string             `json:"namespace"`
	Name      string             `json:"name"`
	Task      string             `json:"task"`
	Intent    string             `json:"intent"`
	Tool      v1.ToolName        `json:"tool"`
	Input     string             `json:"input"`
	Risk      v1.Risk            `json:"risk,omitempty"`
	Category  v1.CommandCategory `json:"category,omitempty"`
	// PolicyRuleRef names what asked, as the Approval's request does.
	PolicyRuleRef v1.PolicyRuleReference `json:"policyRuleRef"`
	RequestedBy   string                 `json:"requestedBy"`
	Approvers     *v1.Approvers          `json:"approvers,omitempty"`
	CreatedAt     metav1.Time            `json:"createdAt"`
	ExpiresAt     metav1.Time            `json:"expiresAt"`
}

// isPending says whether an approval still waits for people: its votes decide
// nothing yet, and it has not expired (by the controller's record or by the clock).
func isPending(a *v1.Approval, now time.Time) bool {
	undecided := !pipeline.CountVotes(a).Decided()
	settled := a.Status.State != "" && a.Status.State != v1.ApprovalStatePending
	return undecided && !settled && now.Before(a.Spec.ExpiresAt.Time)
}

// PendingApprovals picks the approvals that wait for a human, oldest first.
func PendingApprovals(all []v1.Approval, now time.Time) []PendingApproval {
	var pending []*v1.Approval
	for i := range all {
		if isPending(&all[i], now) {
			pending = append(pending, &all[i])
		}
	}
	sort.SliceStable(pending, func(i, j int) bool {
		a, b := pending[i], pending[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	out := make([]PendingApproval, 0, len(pending))
	for _, a := range pending {
		r := a.Spec.Request
		out = append(out, PendingApproval{
			Namespace: a.Namespace, Name: a.Name, Task: a.Spec.TaskRef.Name, Intent: a.Spec.IntentRef.Name,
			Tool: r.Tool, Input: mask.Command(r.Input), Risk: r.Risk, Category: r.Category, PolicyRuleRef: r.PolicyRuleRef,
			RequestedBy: a.Spec.RequestedBy, Approvers: a.Spec.Approvers, CreatedAt: a.CreationTimestamp, ExpiresAt: a.Spec.ExpiresAt,
		})
	}
	return out
}

// RenderApprovals writes the pending approvals as a table.
func RenderApprovals(w io.Writer, rows []PendingApproval, allNamespaces bool, now time.Time) error {
	if len(rows) == 0 {
		_, err := io.WriteString(w, "No pending approvals.\n")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if allNamespaces {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, "NAME\tTASK\tTOOL\tRISK\tRULE\tREQUESTED BY\tAGE\tEXPIRES IN\tINPUT")
	for _, r := range rows {
		if allNamespaces {
			fmt.Fprintf(tw, "%s\t", r.Namespace)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Task, r.Tool, orDash(string(r.Risk)), orDash(r.PolicyRuleRef.String()),
			r.RequestedBy, humanDuration(now.Sub(r.CreatedAt.Time)), humanDuration(r.ExpiresAt.Sub(now)), oneLine(r.Input, 60))
	}
	return tw.Flush()
}

func newApprovalsCommand(o *Options) *cobra.Command {
	var (
		output        string
		allNamespaces bool
	)
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List the approvals that wait for a human, oldest first",
		Example: `  kubectl toolgate approvals -n team-a
  kubectl toolgate approvals -A -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c, err := o.connect()
			if err != nil {
				return err
			}
			var list v1.ApprovalList
			var opts []client.ListOption
			if !allNamespaces {
				opts = append(opts, client.InNamespace(c.namespace))
			}
			if err := c.client.List(cmd.Context(), &list, opts...); err != nil {
				return apiError(err)
			}
			now := o.Now()
			rows := PendingApprovals(list.Items, now)
			if output != outputText {
				return printData(o.Streams.Out, output, rows)
			}
			return RenderApprovals(o.Streams.Out, rows, allNamespaces, now)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the approvals of every namespace")
	addOutputFlag(cmd, &output)
	return cmd
}

// RenderApprovalRequest writes what an approver is asked to decide.
func RenderApprovalRequest(w io.Writer, a *v1.Approval, now time.Time) error {
	var b strings.Builder
	r := a.Spec.Request
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "  %-16s%s\n", label+":", indentRest(fmt.Sprintf(format, args...), "                  "))
	}
	fmt.Fprintf(&b, "Approval %s/%s\n", a.Namespace, a.Name)
	line("Task", "%s (intent %s)", a.Spec.TaskRef.Name, a.Spec.IntentRef.Name)
	line("Tool", "%s", r.Tool)
	// What runs, masked as the Approval masks it: a value used as code stays
	// visible (mask.Command).
	line("Input", "%s", mask.Command(r.Input))
	if r.ProposerReason != "" {
		line("Agent's reason", "%s", mask.Secrets(r.ProposerReason))
	}
	line("Risk", "%s (category %s)", orDash(string(r.Risk)), orDash(string(r.Category)))
	rule := r.PolicyRuleRef.WithGeneration()
	if res := r.Result; res != nil {
		// A release of an output: the call ran already; what is asked is whether
		// the model may read what it printed.
		exit := "none"
		if res.ExitCode != nil {
			exit = fmt.Sprint(*res.ExitCode)
		}
		line("Release", "the call ran (Execution %s, %s, exit code %s); approve to give the model this output, deny to withhold it", res.ExecutionName, res.Outcome, exit)
		line("Output", "%s", mask.Secrets(res.Output))
	} else {
		line("Runs behind", "%s", wallsLine(r.Walls))
	}
	if r.Sandbox != nil {
		line("Sandbox", "%s", sandboxLine(r.Sandbox.Profile))
		line("Network", "%s", networkLine(r.Sandbox.Profile.Network))
	}
	line("Asked by", "%s", rule)
	if r.Reason != "" {
		line("Rule's reason", "%s", mask.Secrets(r.Reason))
	}
	line("Fingerprint", "%s", a.Spec.Fingerprint)
	line("Requested by", "%s at %s", a.Spec.RequestedBy, timestamp(a.CreationTimestamp.Time))
	if ap := a.Spec.Approvers; ap != nil && (len(ap.Users) > 0 || len(ap.Groups) > 0) {
		line("Approvers", "users [%s], groups [%s]", strings.Join(ap.Users, ", "), strings.Join(ap.Groups, ", "))
	}
	line("Votes", "%s", VoteSummary(a))
	left := a.Spec.ExpiresAt.Sub(now)
	if left > 0 {
		line("Expires", "%s (in %s)", timestamp(a.Spec.ExpiresAt.Time), humanDuration(left))
	} else {
		line("Expires", "%s (expired %s ago)", timestamp(a.Spec.ExpiresAt.Time), humanDuration(-left))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// decidable says why an approval can no longer be voted on, or nil.
func decidable(a *v1.Approval, now time.Time) error {
	if t := pipeline.CountVotes(a); t.Decided() {
		return fmt.Errorf("the Approval %s was already decided: %s (%s); a decision is final", a.Name, t.Decision, VoteSummary(a))
	}
	if s := a.Status.State; s != "" && s != v1.ApprovalStatePending {
		return fmt.Errorf("the Approval %s is %s; there is nothing left to decide", a.Name, s)
	}
	if !now.Before(a.Spec.ExpiresAt.Time) {
		return fmt.Errorf("the Approval %s expired at %s; the intent will not run. Ask the agent to propose the call again", a.Name, timestamp(a.Spec.ExpiresAt.Time))
	}
	return nil
}

// confirm asks a yes/no question on the streams; anything but y or yes is no.
func confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s [y/N]: ", question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(out)
		return false
	}
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes"
}

// newDecideCommand builds approve (approve=true) or deny.
func newDecideCommand(o *Options, approve bool) *cobra.Command {
	var (
		comment string
		yes     bool
		scope   grantOptions
	)
	verb, decision := "approve", v1.DecisionApproved
	if !approve {
		verb, decision = "deny", v1.DecisionDenied
	}
	cmd := &cobra.Command{
		Use:   verb + " APPROVAL [-m COMMENT] [--yes]",
		Short: fmt.Sprintf("Show what an approval asks and %s it as yourself", verb),
		Long: fmt.Sprintf(`Show what is being asked (tool, input with secrets masked, rule, risk,
fingerprint, requester, expiry), ask for confirmation unless --yes, and %s the
approval as the user the API server knows you as (SelfSubjectReview): your vote,
appended to spec.votes with a JSON patch. The API server's admission policy checks
that you may vote on it; its refusal is printed as it is. An approval that needs
several approvers (approvers.required) is approved once that many people approved;
any one Deny denies it. The output says who has voted and what is still needed.

Approving a git_push also shows the change it pushes: the push's record (ConfigMap
TASK-git-push, the diff kubectl toolgate diff prints while the push is pending) and
its tree hash, which must be the tree the push binds; the push pod pushes that tree
and no other. A push whose record is missing or names another tree is not approved.`, verb),
		Example: fmt.Sprintf(`  kubectl toolgate %s fix-tests-0-1 -n team-a -m "ok, tests only"`, verb),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := o.connect()
			if err != nil {
				return err
			}
			a := &v1.Approval{}
			if err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: args[0]}, a); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("the Approval %q was not found in namespace %q (kubectl toolgate approvals lists the pending ones)", args[0], c.namespace)
				}
				return apiError(err)
			}
			now := o.Now()
			if err := RenderApprovalRequest(o.Streams.Out, a, now); err != nil {
				return err
			}
			if err := decidable(a, now); err != nil {
				return err
			}
			if approve || a.Spec.Request.Tool != v1.ToolGitPush {
				// A push is approved on what it pushes, which the input only names; a
				// file tool's change is shown whichever way it is decided.
				if err := showChange(ctx, c, a, o.Streams.Out); err != nil {
					return err
				}
			}
			user, err := c.whoAmI(ctx)
			if err != nil {
				return err
			}
			var grant *v1.ApprovalGrant
			if approve && strings.EqualFold(scope.scope, "once") && (scope.prefix != "" || scope.uses != 0 || scope.within != 0) {
				return errors.New("--prefix, --uses and --for extend an approval to later calls and need --scope task or prefix; with --scope once (the default) the approval is for this call only, and nothing was changed")
			}
			if approve && !strings.EqualFold(scope.scope, "once") {
				// Checked before the decision: a scope the rule refuses leaves the
				// approval pending.
				if grant, err = scopedGrant(ctx, c, a, user, scope, now); err != nil {
					return err
				}
			}
			if !yes && !confirm(o.Streams.In, o.Streams.Out, fmt.Sprintf("%s this call as %s?", strings.ToUpper(verb[:1])+verb[1:], user)) {
				return errors.New("not confirmed; nothing was changed")
			}
			if err := Vote(ctx, c.client, a, user, decision, comment); err != nil {
				return err
			}
			fmt.Fprintf(o.Streams.Out, "Approval %s %s by %s: %s.\n", a.Name, strings.ToLower(string(decision)), user, VoteSummary(a))
			if grant != nil {
				if err := c.client.Create(ctx, grant); err != nil {
					return fmt.Errorf("your vote stands, and the grant was not created: %w", apiError(err))
				}
				fmt.Fprintf(o.Streams.Out, "ApprovalGrant %s: scope %s%s, %d uses until %s. Delete it to revoke it.\n", grant.Name, grant.Spec.Scope, prefixText(grant), grant.Spec.MaxUses, timestamp(grant.Spec.ExpiresAt.Time))
			}
			return nil
		},
	}
	if approve {
		cmd.Flags().StringVar(&scope.scope, "scope", "once", "What the approval covers: once (this call), task (the same call again in this task) or prefix (bash calls every part of which starts with --prefix), as far as the rule's grants allow")
		cmd.Flags().Int32Var(&scope.uses, "uses", 0, "How many later calls the grant allows (default: 10, or the rule's maxUses if lower)")
		cmd.Flags().DurationVar(&scope.within, "for", 0, "How long the grant lasts (default: the rule's maxDurationSeconds)")
		cmd.Flags().StringVar(&scope.prefix, "prefix", "", `The argv words later calls must start with, for --scope prefix, for example "npm test"`)
	}
	cmd.Flags().StringVarP(&comment, "message", "m", "", "Comment recorded with your vote; for a denial it is fed back to the model")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Do not ask for confirmation")
	return cmd
}

// pushChange is the change a git_push Approval pushes: the push's own record (its
// diff, escaped, and its tree), after checking that it is the record of the tree
// and base the push's ToolIntent binds, which the Approval's fingerprint covers and
// the push pod enforces. summary says what is pushed; a push whose change cannot be
// shown so is not approved, and the error says why.
func pushChange(ctx context.Context, c *cluster, a *v1.Approval) (summary, diff string, err error) {
	refuse := func(format string, args ...any) (string, string, error) {
		return "", "", fmt.Errorf("not approved: "+format+"; deny it, or ask the task's owner", args...)
	}
	intent := &v1.ToolIntent{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.IntentRef.Name}, intent); err != nil {
		return refuse("reading ToolIntent %s, the push: %v", a.Spec.IntentRef.Name, apiError(err))
	}
	var in tools.GitPushInput
	if err := json.Unmarshal(intent.Spec.Input.Raw, &in); err != nil {
		return refuse("ToolIntent %s holds no git_push input: %v", intent.Name, err)
	}
	task := &v1.AgentTask{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.TaskRef.Name}, task); err != nil {
		return refuse("reading AgentTask %s, whose change is pushed: %v", a.Spec.TaskRef.Name, apiError(err))
	}
	if !metav1.IsControlledBy(intent, task) {
		return refuse("ToolIntent %s is not AgentTask %s's push (the task does not control it)", intent.Name, task.Name)
	}
	name := pipeline.PushRecordName(task.Name)
	cm := &corev1.ConfigMap{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, cm); err != nil {
		return refuse("the change it pushes is recorded in ConfigMap %s, which cannot be read (%v)", name, apiError(err))
	}
	shown, err := parseRecord(cm, task)
	if shown.task == nil {
		return refuse("%v", err)
	}
	if shown.rec.Tree != in.Tree || shown.rec.Base != in.Base {
		return refuse("ConfigMap %s records tree %s on %s, but ToolIntent %s pushes tree %s on %s: what would be pushed is not what is recorded",
			name, shown.rec.Tree, shown.rec.Base, intent.Name, in.Tree, in.Base)
	}
	shown.push = intent.Name
	var b strings.Builder
	fmt.Fprintf(&b, "  %-16stree %s on %s, as one commit on the new branch %s of %s; the push pod pushes no other tree\n", "Pushes:", in.Tree, in.Base, in.Branch, in.URL)
	fmt.Fprintf(&b, "The change it pushes (ConfigMap %s):\n", name)
	summarize(&b, shown)
	if err != nil {
		// Too large for the record: it says where the diff is.
		fmt.Fprintf(&b, "  %v\n", err)
		return b.String(), "", nil
	}
	return b.String(), mask.Escape(shown.diff), nil
}
