package console

import "context"

// Backend is what the console shows and does, in the words of the kubectl plugin:
// it reads and writes with the user's own credentials and renders with the plugin's
// own renderers, so a page shows what the commands print. Errors are shown to the
// user as they are.
type Backend interface {
	// Pending lists the approvals that wait for a human, oldest first.
	Pending(ctx context.Context) ([]ApprovalRow, error)
	// Approval is everything `kubectl toolgate approve` shows about one approval.
	Approval(ctx context.Context, namespace, name string) (ApprovalPage, error)
	// Decide approves (approve=true) or denies the approval as the user, and says
	// what was recorded. shown is the Shown of the page the user decided on: an
	// approval that is no longer that one (deleted and asked again under the same
	// name) is refused. A refusal (by admission, or because the approval can no
	// longer be decided) is the error, word for word.
	Decide(ctx context.Context, namespace, name, shown string, approve bool, comment string) (string, error)
	// Tasks lists the tasks.
	Tasks(ctx context.Context) ([]TaskRow, error)
	// Task is a task's timeline, as `kubectl toolgate trace` prints it.
	Task(ctx context.Context, namespace, name string) (TaskPage, error)
	// WatchApprovals calls changed after every change to an approval, until ctx
	// ends.
	WatchApprovals(ctx context.Context, changed func()) error
}

// ApprovalRow is one line of the pending approvals.
type ApprovalRow struct {
	Namespace, Name, Task, Tool, Risk, Rule, RequestedBy, Age, ExpiresIn, Input string
}

// ApprovalPage is one approval, rendered.
type ApprovalPage struct {
	Namespace, Name, Task string
	// Request is what is asked, as approve prints it: the input, the rule and its
	// reason, the walls, sandbox and network (with the DNS warning), the fingerprint.
	Request string
	// Change is the change the call makes, as a diff (edit_file, write_file, and a
	// git_push's pushed tree), "" when the tool changes no file it names.
	Change string
	// ChangeError says why a change that should be shown cannot be.
	ChangeError string
	// ApproveRefused: the change cannot be shown and the call is not approved
	// without it (a git_push, as approve refuses it); Approve is not offered.
	ApproveRefused bool
	// Goal is the task's goal; Timeline its trace so far.
	Goal, Timeline string
	// Closed says why the approval can no longer be decided, "" while it can.
	Closed string
	// Shown names the approval the page shows (its UID and fingerprint); the form
	// sends it back, and a decision is recorded only on that approval.
	Shown string
}

// TaskRow is one line of the tasks.
type TaskRow struct {
	Namespace, Name, Mode, Phase, Goal string
}

// TaskPage is a task's timeline.
type TaskPage struct {
	Namespace, Name, Goal, Timeline string
}
