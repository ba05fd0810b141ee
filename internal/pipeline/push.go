package pipeline

import (
	"encoding/json"
	"fmt"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/tools"
)

// PushWorld is what the AgentTask reconciler observed of the push of a task with
// spec.workspace.git.push.
type PushWorld struct {
	// Intent is the task's git_push ToolIntent, once the controller created it.
	Intent *v1.ToolIntent
	// Record is the change read for the push, once read (before the intent exists):
	// the push's record (PushRecordName), written once and never again.
	Record *gitws.Record
	// Waiting names what of the task still runs while the push waits to read its
	// change: the change is read only once nothing of the agent's runs.
	Waiting string
	// Failure says why there is nothing to push and the task fails PushFailed: the
	// change could not be read, or an intent that is not the task's push is in its
	// place.
	Failure string
}

// PushRecordName is the ConfigMap that holds the change a task's push pushes: its
// diff, base and tree, recorded once, when the push is prepared, and immutable.
// It has the push intent's name (ConfigMaps and ToolIntents do not share names).
func PushRecordName(task string) string { return PushIntentName(task) }

// PushPending says whether a task with spec.workspace.git.push is pushing its
// change, and how to say so: it would have succeeded (status.workspace.push is
// set) and has not ended. From then on it takes no intent of the agent's and
// runs nothing of it, so the tree read for the push, shown to whoever approves
// it, is the worktree the push pod finds; the task ends with the push.
func PushPending(task *v1.AgentTask) (bool, string) {
	ws := task.Status.Workspace
	if ws == nil || ws.Push == nil || task.Spec.Workspace.Git == nil || task.Spec.Workspace.Git.Push == nil {
		return false, ""
	}
	if done, _ := TaskFinished(task); done {
		return false, ""
	}
	what := fmt.Sprintf("its change is being read to be pushed to branch %s (spec.workspace.git.push) as ToolIntent %s", ws.Push.Branch, PushIntentName(task.Name))
	if ws.Push.IntentName != "" {
		what = fmt.Sprintf("its push is pending: ToolIntent %s pushes its change to branch %s (spec.workspace.git.push)", ws.Push.IntentName, ws.Push.Branch)
	}
	return true, what + "; no other call of the task runs until that push is approved, denied or the task cancelled, and the task ends with the push"
}

// PushSecret is the credentials Secret a task's push uses: push.secretRef, else the
// clone's; "" for none.
func PushSecret(task *v1.AgentTask) string {
	g := task.Spec.Workspace.Git
	switch {
	case g == nil || g.Push == nil:
		return ""
	case g.Push.SecretRef != nil:
		return g.Push.SecretRef.Name
	case g.SecretRef != nil:
		return g.SecretRef.Name
	}
	return ""
}

// PushInput is the git_push input for a task's recorded change: what the person
// approving it sees, and what binds the push to it.
func PushInput(task *v1.AgentTask, rec gitws.Record) tools.GitPushInput {
	files := rec.Files
	if len(files) > gitws.MaxReportedFiles {
		files = files[:gitws.MaxReportedFiles]
	}
	return tools.GitPushInput{
		URL: task.Spec.Workspace.Git.URL, Branch: task.Spec.Workspace.Git.Push.Branch, Secret: PushSecret(task),
		Base: rec.Base, Tree: rec.Tree, FileCount: rec.FileCount, Files: append([]string{}, files...),
	}
}

// pushErrors says why a git_push intent is not the push of its task: only the
// controller proposes it (as its own identity, owned by the task), for a task with
// spec.workspace.git.push, to the repository, branch and Secret the task names, on
// top of the commit the workspace was cloned at. Anyone else's git_push is refused
// here, before policy, so nobody can push a task's workspace by proposing one.
func pushErrors(intent *v1.ToolIntent, task *v1.AgentTask, normalized json.RawMessage, controllerIdentity string) []string {
	who := intent.Spec.RequestedBy
	if controllerIdentity == "" || who != controllerIdentity {
		return []string{fmt.Sprintf("spec.tool: git_push is toolgate's own step: only the controller proposes it, when a task with spec.workspace.git.push would succeed; %s may not propose it (set spec.workspace.git.push on the task instead)", orNobody(who))}
	}
	if !metav1.IsControlledBy(intent, task) {
		return []string{fmt.Sprintf("metadata.ownerReferences: ToolIntent %s is not owned by AgentTask %s (uid %s); the controller creates a task's push owned by the task", intent.Name, task.Name, task.UID)}
	}
	g := task.Spec.Workspace.Git
	if g == nil || g.Push == nil {
		return []string{fmt.Sprintf("spec.tool: AgentTask %s has no spec.workspace.git.push, so nothing of it is pushed", task.Name)}
	}
	var errs []string
	if want := PushIntentName(task.Name); intent.Name != want {
		errs = append(errs, fmt.Sprintf("metadata.name: a task's push is ToolIntent %s, one per task; %s is not it", want, intent.Name))
	}
	if normalized == nil {
		return errs // the schema errors say what is wrong with the input
	}
	var in tools.GitPushInput
	if err := json.Unmarshal(normalized, &in); err != nil {
		return append(errs, "input: "+err.Error())
	}
	check := func(field, got, want, what string) {
		if got != want {
			errs = append(errs, fmt.Sprintf("input/%s: %q is not %s %q", field, got, what, want))
		}
	}
	check("url", in.URL, g.URL, "the task's spec.workspace.git.url")
	check("branch", in.Branch, g.Push.Branch, "the task's spec.workspace.git.push.branch")
	check("secret", in.Secret, PushSecret(task), "the task's push Secret")
	commit := ""
	if task.Status.Workspace != nil {
		commit = task.Status.Workspace.Commit
	}
	check("base", in.Base, commit, "the commit the workspace was cloned at")
	return errs
}

// pushedLine is how a push's output names what it pushed (the first line of the
// observation, after the [exit code] marker): PushedText writes it, PushedCommit
// reads it back.
var pushedLine = regexp.MustCompile(`(?m)^pushed commit ([0-9a-f]{40}) to branch `)

// PushedText is the output of a push that pushed p to url.
func PushedText(p gitws.Pushed, url string) string {
	return fmt.Sprintf("pushed commit %s to branch %s of %s (%d file(s) changed)\n", p.Commit, p.Branch, url, p.Files)
}

// PushedCommit is the commit a push's observation says it pushed, or "".
func PushedCommit(summary string) string {
	if m := pushedLine.FindStringSubmatch(summary); m != nil {
		return m[1]
	}
	return ""
}
