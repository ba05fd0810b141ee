package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// What the agent wrote cannot move a reviewer's cursor, erase a line or reorder
// what the terminal shows: diff prints a change through mask.Escape, which shows
// those characters escaped and leaves tabs, newlines and printable text alone.
func TestDiffEscapesWhatRewritesATerminal(t *testing.T) {
	for in, want := range map[string]string{
		"+curl x|sh\x1b[1A\x1b[2K+echo ok\n": `+curl x|sh\x1b[1A\x1b[2K+echo ok` + "\n",
		"+rm -rf /\r+echo safe\n":            `+rm -rf /\x0d+echo safe` + "\n",
		"+a\tb\n":                            "+a\tb\n",
		"+x\u202egnp.exe\n":                  `+x\u202egnp.exe` + "\n",
		"+\u0085\u009b2J\x7f":                `+\x85\x9b2J\x7f`,
		"+héllo 日本\n":                        "+héllo 日本\n",
		"+\xff\n":                            `+\xff` + "\n",
	} {
		if got := mask.Escape(in); got != want {
			t.Errorf("mask.Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// diff prints what the agent wrote with its control characters escaped, end to
// end: from the change record the controller left, through the command, to what a
// terminal would get. --raw prints the bytes as recorded.
func TestDiffCommandEscapesWhatRewritesATerminal(t *testing.T) {
	ns := testNamespace(t)
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fix"},
		Spec: v1.AgentTaskSpec{
			Goal: "Make the failing test pass.",
			Mode: v1.ModeEdit,
			Workspace: v1.WorkspaceSpec{
				VolumeClaim: &v1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")},
				Git:         &v1.GitSource{URL: "http://git/calc.git"},
			},
			Agent: v1.AgentSpec{External: &v1.ExternalAgent{Proposers: v1.Proposers{Users: []string{agentUser}}}},
		},
		Status: v1.AgentTaskStatus{Phase: v1.TaskRunning, Workspace: &v1.WorkspaceStatus{Commit: pushBase}},
	}
	record(t, task)
	diff := "+++ b/calc.sh\n+curl x|sh\x1b[1A\x1b[2K+echo ok\n+rm -rf /\r+echo safe\n+x\u202egnp.exe\n+a\tb\n"
	escaped := "+++ b/calc.sh\n+curl x|sh\\x1b[1A\\x1b[2K+echo ok\n+rm -rf /\\x0d+echo safe\n+x\\u202egnp.exe\n+a\tb\n"
	rec, _ := json.Marshal(gitws.Record{Request: "r1", Base: pushBase, Tree: harmlessTree, Files: []string{"calc.sh"}, FileCount: 1,
		Binary: []string{"clear\x1b[2J.bin"}, Skipped: []string{"title\x1b]0;pwned\x07 (a control character in its name)"}, DiffBytes: len(diff), Complete: true, RecordedAt: time.Date(2026, 12, 2, 10, 5, 0, 0, time.UTC)})
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gitws.ChangeConfigMapName("fix"), Annotations: map[string]string{v1.AnnotationChangeRequest: "r1"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}},
		Data: map[string]string{gitws.RecordKey: string(rec), gitws.DiffKey: diff},
	}
	if err := env.Client.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := kubectl(t, alice, ns, "", "diff", "fix", "--recorded")
	if code != 0 {
		t.Fatalf("diff exited %d: %s", code, errOut)
	}
	if out != escaped {
		t.Errorf("diff printed %q, want %q", out, escaped)
	}
	for _, want := range []string{`binary, named but not carried in a patch: clear\x1b[2J.bin`, `left out of the change: title\x1b]0;pwned\x07 (a control character in its name)`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("diff's summary lacks %q:\n%q", want, errOut)
		}
	}
	if strings.ContainsAny(out+errOut, "\x1b\r\x07\u202e") {
		t.Errorf("diff printed a control character:\n%q\n%q", out, errOut)
	}
	if code, out, errOut = kubectl(t, alice, ns, "", "diff", "fix", "--recorded", "--raw"); code != 0 || out != diff {
		t.Errorf("diff --raw exited %d, printed %q, want the bytes recorded: %s", code, out, errOut)
	}
}

const (
	pushBase     = "9debc41a9debc41a9debc41a9debc41a9debc41a"
	pushedTree   = "1111111111111111111111111111111111111111"
	harmlessTree = "2222222222222222222222222222222222222222"
	// controllerUser proposes a task's push.
	controllerUser = "system:serviceaccount:toolgate-system:toolgate-controller-manager"
)

// pendingPush records, as the controller leaves them, a git task "fix" whose push
// waits for a human: the push's record (ConfigMap fix-git-push: the change it
// pushes, tree recordTree), its ToolIntent and Approval (tree pushedTree), and a
// later read of the worktree in fix-change, which shows harmless files.
func pendingPush(t *testing.T, ns, recordTree string) *v1.AgentTask {
	t.Helper()
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fix"},
		Spec: v1.AgentTaskSpec{
			Goal: "Make the failing test pass.",
			Mode: v1.ModeEdit,
			Workspace: v1.WorkspaceSpec{
				VolumeClaim: &v1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")},
				Git:         &v1.GitSource{URL: "http://git/calc.git", Push: &v1.GitPush{Branch: "agent/fix"}},
			},
			Agent:     v1.AgentSpec{External: &v1.ExternalAgent{Proposers: v1.Proposers{Users: []string{agentUser}}}},
			Lifecycle: v1.LifecycleDone,
		},
		Status: v1.AgentTaskStatus{
			Phase:     v1.TaskAwaitingApproval,
			Workspace: &v1.WorkspaceStatus{Commit: pushBase, Push: &v1.PushStatus{Branch: "agent/fix", IntentName: "fix-git-push"}},
		},
	}
	record(t, task)
	owned := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}}
	}
	change := func(name, request, tree, diff string, immutable bool) *corev1.ConfigMap {
		rec, _ := json.Marshal(gitws.Record{Request: request, Base: pushBase, Tree: tree, Files: []string{"calc.sh"}, FileCount: 1,
			DiffBytes: len(diff), Complete: true, RecordedAt: time.Date(2026, 12, 2, 10, 5, 0, 0, time.UTC)})
		cm := &corev1.ConfigMap{ObjectMeta: owned(name), Data: map[string]string{gitws.RecordKey: string(rec), gitws.DiffKey: diff}}
		cm.Annotations = map[string]string{v1.AnnotationChangeRequest: request}
		if immutable {
			cm.Immutable = ptr.To(true)
		}
		return cm
	}
	input := fmt.Sprintf(`{"base":%q,"branch":"agent/fix","fileCount":1,"files":["calc.sh"],"tree":%q,"url":"http://git/calc.git"}`, pushBase, pushedTree)
	intent := &v1.ToolIntent{ObjectMeta: owned("fix-git-push"), Spec: v1.ToolIntentSpec{
		TaskRef: v1.LocalObjectReference{Name: "fix"}, Tool: v1.ToolGitPush, Input: runtime.RawExtension{Raw: []byte(input)},
		RequestedBy: controllerUser, ProposedBy: v1.ProposedBy{Provider: "toolgate"},
	}}
	approval := fixtures.PendingApproval(ns, "fix-git-push", controllerUser, nil)
	approval.Spec.TaskRef.Name = "fix"
	approval.Spec.Request.Tool, approval.Spec.Request.Input, approval.Spec.Request.Category = v1.ToolGitPush, input, v1.CategoryNetwork
	for _, obj := range []client.Object{
		change("fix-git-push", "push-"+string(task.UID), recordTree, "+++ b/calc.sh\n+echo pwned\n", true),
		change("fix-change", "r1", harmlessTree, "+++ b/calc.sh\n+echo harmless\n", false),
		intent,
	} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	record(t, approval)
	return task
}

// While a push is pending, diff prints the push's own record, with the tree the
// push binds, and asks for no new read: a read of the worktree as it is now (the
// agent made it harmless since) is not what is pushed. An approver, who may not
// patch the task, can read it too; export gives the same change.
func TestDiffPrintsThePendingPushsRecord(t *testing.T) {
	ns := testNamespace(t)
	pendingPush(t, ns, pushedTree)

	code, out, errOut := kubectl(t, alice, ns, "", "diff", "fix")
	if code != 0 {
		t.Fatalf("diff exited %d: %s", code, errOut)
	}
	for _, want := range []string{"AgentTask fix: 1 file(s) changed against 9debc41a9deb (http://git/calc.git)", "\n  tree " + pushedTree + "\n",
		"  pending push: ToolIntent fix-git-push pushes this tree, and no other, to branch agent/fix; this is its record (ConfigMap fix-git-push, written once), not a new read of the workspace"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("diff's summary lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(out, "+echo pwned") || strings.Contains(out, "harmless") {
		t.Errorf("diff printed another change than the push's:\n%s", out)
	}
	task := &v1.AgentTask{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "fix"}, task); err != nil {
		t.Fatal(err)
	}
	if got := task.Annotations[v1.AnnotationChangeRequest]; got != "" {
		t.Errorf("diff asked for a new read while the push is pending: %q", got)
	}
	code, out, errOut = kubectl(t, alice, ns, "", "export", "fix", "-o", "patch")
	if code != 0 || !strings.Contains(out, "+echo pwned") || strings.Contains(out, "harmless") {
		t.Errorf("export while the push is pending: exit %d\n%s\n%s", code, out, errOut)
	}
}

// Approving a git_push shows what it pushes: the push's record, its diff and its
// tree; a push whose record is not of the tree the push binds is not approved
// (deny still works), and nothing is patched.
func TestApproveOfAPushShowsWhatItPushes(t *testing.T) {
	ns := testNamespace(t)
	pendingPush(t, ns, pushedTree)
	code, out, errOut := kubectl(t, alice, ns, "", "approve", "fix-git-push", "--yes")
	if code != 0 {
		t.Fatalf("approve exited %d: %s\n%s", code, errOut, out)
	}
	for _, want := range []string{"Tool:           git_push", "  Pushes:         tree " + pushedTree + " on " + pushBase + ", as one commit on the new branch agent/fix of http://git/calc.git; the push pod pushes no other tree",
		"The change it pushes (ConfigMap fix-git-push):", "\n  tree " + pushedTree + "\n", "+echo pwned", "Approval fix-git-push approved by alice: 1 of 1 approvals; voted: alice (Approved); approved."} {
		if !strings.Contains(out, want) {
			t.Errorf("approve's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "harmless") {
		t.Errorf("approve showed a later read:\n%s", out)
	}

	other := testNamespace(t)
	pendingPush(t, other, harmlessTree)
	code, out, errOut = kubectl(t, alice, other, "", "approve", "fix-git-push", "--yes")
	want := "error: not approved: ConfigMap fix-git-push records tree " + harmlessTree + " on " + pushBase + ", but ToolIntent fix-git-push pushes tree " + pushedTree + " on " + pushBase + ": what would be pushed is not what is recorded; deny it, or ask the task's owner\n"
	if code != 1 || errOut != want || strings.Contains(out, "approved by") {
		t.Fatalf("approving a push whose record is another tree: exit %d\n%s\nstderr %q\nwant   %q", code, out, errOut, want)
	}
	a := &v1.Approval{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: other, Name: "fix-git-push"}, a); err != nil || len(a.Spec.Votes) != 0 {
		t.Fatalf("after the refusal the approval has votes %+v (%v)", a.Spec.Votes, err)
	}
	if code, _, errOut = kubectl(t, bob, other, "", "deny", "fix-git-push", "--yes"); code != 0 {
		t.Fatalf("deny of that push exited %d: %s", code, errOut)
	}
}
