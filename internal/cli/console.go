package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/console"
	"github.com/toolgate/toolgate/internal/mask"
)

func newConsoleCommand(o *Options) *cobra.Command {
	var (
		port          int
		open          bool
		allNamespaces bool
	)
	cmd := &cobra.Command{
		Use:   "console [--port N] [--open] [-A]",
		Short: "Serve a web console on 127.0.0.1 that lists, shows and decides approvals as you",
		Long: `Serve a web console on 127.0.0.1 (loopback only) that shows what the other
commands print: the pending approvals, following the cluster without a reload; an
approval's request (input, rule and reason, walls, sandbox and network, fingerprint),
the change it makes (the diff of an edit_file, a write_file, a git_push) and its
task's timeline; every task with its trace. Approve and deny record the decision as
you, through the API server, exactly as kubectl toolgate approve does; a refusal by
admission is shown word for word.

The console acts with your kubeconfig's credentials, as kubectl proxy does; the page
never sees them. It prints its URL with a token made for this launch: every request
must carry the token, name 127.0.0.1:PORT or localhost:PORT as its Host, and come
from the console's own pages (Origin), so other sites and other users of the machine
cannot use it. Stop it with Ctrl-C.`,
		Example: `  kubectl toolgate console -n team-a
  kubectl toolgate console -A --port 8765 --open`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			srv, err := o.newConsole(port, allNamespaces)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Streams.Out, "Console: %s\n(the token in this URL is the console's key: do not share it; Ctrl-C stops the console)\n", srv.URL())
			if open {
				openBrowser(srv.URL(), o.Streams.ErrOut)
			}
			return srv.Serve(cmd.Context())
		},
	}
	cmd.Flags().IntVar(&port, "port", 0, "Port on 127.0.0.1 to serve on; 0 picks a free one")
	cmd.Flags().BoolVar(&open, "open", false, "Open the console's URL in the default browser")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Show the approvals and tasks of every namespace you may read")
	return cmd
}

// newConsole connects with the kubectl flags and listens on 127.0.0.1:port.
func (o *Options) newConsole(port int, allNamespaces bool) (*console.Server, error) {
	c, err := o.connect()
	if err != nil {
		return nil, err
	}
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	watcher, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return console.New(&consoleBackend{c: c, watcher: watcher, allNamespaces: allNamespaces, now: o.Now, errOut: o.Streams.ErrOut}, port)
}

// openBrowser asks the desktop to open url; when it cannot, the printed URL is there.
func openBrowser(url string, errOut io.Writer) {
	name := "xdg-open"
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		name = "explorer"
	}
	cmd := exec.Command(name, url)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(errOut, "could not open a browser (%v): open the URL above yourself\n", err)
		return
	}
	go func() { _ = cmd.Wait() }()
}

// recordDecision is the console's one write of a decision: the vote the CLI casts.
func recordDecision(ctx context.Context, c client.Client, a *v1.Approval, decision v1.ApprovalDecision, user, comment string) error {
	return Vote(ctx, c, a, user, decision, comment)
}

// consoleBackend is the console's view of the cluster: the user's own clients, and
// the renderers the commands print with.
type consoleBackend struct {
	c             *cluster
	watcher       client.WithWatch
	allNamespaces bool
	now           func() time.Time
	// errOut is where the console says what it cannot do in the background.
	errOut io.Writer
}

// in is the connection for namespace ns, with an archive reader of its own: the
// console serves requests at once, and a reader remembers what it asked.
func (b *consoleBackend) in(ns string) *cluster {
	return &cluster{client: b.c.client, core: b.c.core, authentication: b.c.authentication, namespace: ns, archive: &archiveReader{cfg: b.c.archive.cfg, namespace: ns, errOut: io.Discard}}
}

// scope is where the console lists: the namespace of the kubectl flags, or all.
func (b *consoleBackend) scope() []client.ListOption {
	if b.allNamespaces {
		return nil
	}
	return []client.ListOption{client.InNamespace(b.c.namespace)}
}

func (b *consoleBackend) Pending(ctx context.Context) ([]console.ApprovalRow, error) {
	var list v1.ApprovalList
	if err := b.c.client.List(ctx, &list, b.scope()...); err != nil {
		return nil, apiError(err)
	}
	now := b.now()
	var rows []console.ApprovalRow
	for _, r := range PendingApprovals(list.Items, now) {
		rows = append(rows, console.ApprovalRow{
			Namespace: r.Namespace, Name: r.Name, Task: r.Task, Tool: string(r.Tool), Risk: orDash(string(r.Risk)), Rule: orDash(r.PolicyRuleRef.String()),
			RequestedBy: r.RequestedBy, Age: humanDuration(now.Sub(r.CreatedAt.Time)), ExpiresIn: humanDuration(r.ExpiresAt.Sub(now)), Input: oneLine(r.Input, 80),
		})
	}
	return rows, nil
}

func (b *consoleBackend) getApproval(ctx context.Context, ns, name string) (*v1.Approval, error) {
	a := &v1.Approval{}
	if err := b.c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, a); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("the Approval %q was not found in namespace %q", name, ns)
		}
		return nil, apiError(err)
	}
	return a, nil
}

func (b *consoleBackend) Approval(ctx context.Context, ns, name string) (console.ApprovalPage, error) {
	a, err := b.getApproval(ctx, ns, name)
	if err != nil {
		return console.ApprovalPage{}, err
	}
	now := b.now()
	page := console.ApprovalPage{Namespace: ns, Name: name, Task: a.Spec.TaskRef.Name, Shown: shownAs(a)}
	var req bytes.Buffer
	if err := RenderApprovalRequest(&req, a, now); err != nil {
		return page, err
	}
	page.Request = req.String()
	c := b.in(ns)
	summary, diff, err := approvalChange(ctx, c, a)
	if err != nil {
		page.ChangeError = err.Error()
		page.ApproveRefused = a.Spec.Request.Tool == v1.ToolGitPush
	}
	page.Change = summary + diff
	if err := decidable(a, now); err != nil {
		page.Closed = err.Error()
	}
	// The timeline so far, as trace prints it; an approval outlives nothing it
	// needs, but a task may be gone: the page says so and still shows the request.
	objs, err := c.loadTask(ctx, a.Spec.TaskRef.Name, true)
	if err != nil {
		page.Timeline = err.Error()
		return page, nil
	}
	page.Goal = mask.Secrets(objs.task.Spec.Goal)
	var tl bytes.Buffer
	if err := RenderTrace(&tl, BuildTrace(objs.task, objs.intents, objs.approvals, objs.executions)); err != nil {
		return page, err
	}
	page.Timeline = tl.String()
	return page, nil
}

// Decide makes the checks approve makes before its write (still decidable; for a
// push, its change can be shown), then records the decision as the user the API
// server knows.
func (b *consoleBackend) Decide(ctx context.Context, ns, name, shown string, approve bool, comment string) (string, error) {
	a, err := b.getApproval(ctx, ns, name)
	if err != nil {
		return "", err
	}
	if err := decidable(a, b.now()); err != nil {
		return "", err
	}
	decision := v1.DecisionDenied
	if approve {
		decision = v1.DecisionApproved
		if a.Spec.Request.Tool == v1.ToolGitPush {
			if _, _, err := pushChange(ctx, b.in(ns), a); err != nil {
				return "", err
			}
		}
	}
	user, err := b.c.whoAmI(ctx)
	if err != nil {
		return "", err
	}
	if shown != shownAs(a) {
		return "", fmt.Errorf("the Approval %s is not the one your page showed (it was asked again since, for another call or under other rules): nothing was recorded; read it again and decide", name)
	}
	if err := recordDecision(ctx, b.c.client, a, decision, user, comment); err != nil {
		return "", err
	}
	return fmt.Sprintf("Approval %s %s by %s: %s.", a.Name, strings.ToLower(string(decision)), user, VoteSummary(a)), nil
}

func (b *consoleBackend) Tasks(ctx context.Context) ([]console.TaskRow, error) {
	var list v1.AgentTaskList
	if err := b.c.client.List(ctx, &list, b.scope()...); err != nil {
		return nil, apiError(err)
	}
	sort.SliceStable(list.Items, func(i, j int) bool {
		x, y := list.Items[i], list.Items[j]
		if x.Namespace != y.Namespace {
			return x.Namespace < y.Namespace
		}
		return x.Name < y.Name
	})
	rows := make([]console.TaskRow, 0, len(list.Items))
	for _, t := range list.Items {
		rows = append(rows, console.TaskRow{Namespace: t.Namespace, Name: t.Name, Mode: string(t.Spec.Mode), Phase: orDash(string(t.Status.Phase)), Goal: oneLine(mask.Secrets(t.Spec.Goal), 100)})
	}
	return rows, nil
}

func (b *consoleBackend) Task(ctx context.Context, ns, name string) (console.TaskPage, error) {
	objs, err := b.in(ns).loadTask(ctx, name, true)
	if err != nil {
		return console.TaskPage{}, err
	}
	var tl bytes.Buffer
	if err := RenderTrace(&tl, BuildTrace(objs.task, objs.intents, objs.approvals, objs.executions)); err != nil {
		return console.TaskPage{}, err
	}
	return console.TaskPage{Namespace: ns, Name: name, Goal: mask.Secrets(objs.task.Spec.Goal), Timeline: tl.String()}, nil
}

// WatchApprovals watches the approvals in the console's scope and calls changed
// after each event; a watch the server ends is started again, after a pause that
// grows while the server keeps refusing.
func (b *consoleBackend) WatchApprovals(ctx context.Context, changed func()) error {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 8, Cap: 30 * time.Second}
	for ctx.Err() == nil {
		w, err := b.watcher.Watch(ctx, &v1.ApprovalList{}, b.scope()...)
		if err != nil {
			fmt.Fprintf(b.errOut, "watching approvals: %v; the list is not live until the watch is open again\n", apiError(err))
			select {
			case <-ctx.Done():
			case <-time.After(backoff.Step()):
			}
			continue
		}
		backoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 8, Cap: 30 * time.Second}
		for range w.ResultChan() {
			changed()
		}
		w.Stop()
		// The list may have changed while no watch was open.
		changed()
	}
	return ctx.Err()
}

// shownAs names an approval as a page showed it: its UID (an approval deleted and
// asked again under its name is another) and its fingerprint (the call, rule,
// walls and sandbox the person read).
func shownAs(a *v1.Approval) string {
	return string(a.UID) + "/" + a.Spec.Fingerprint
}
