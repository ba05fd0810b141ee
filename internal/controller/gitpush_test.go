package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/gitws/gittest"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tools"
)

// pushBranch is where the tests' tasks push.
const pushBranch = "toolgate/fix"

// pushTask is a git task with spec.workspace.git.push, cloned into claim (a
// folder standing for its claim), whose agent fixed calc.sh and added NOTES.md
// (and left a .toolgate/ scratch file, which is no part of the change).
func (p *pipelineEnv) pushTask(name string, repo gittest.Repo, edit bool) (claim string) {
	p.t.Helper()
	task := p.gitTask(name, repo.URL, "main", "git-creds")
	unchanged := task.DeepCopy()
	task.Spec.Workspace.Git.Push = &v1.GitPush{Branch: pushBranch}
	// A merge patch: the controller writes the task's status meanwhile.
	if err := env.Client.Patch(p.t.Context(), task, client.MergeFrom(unchanged)); err != nil {
		p.t.Fatal(err)
	}
	claim = p.t.TempDir()
	if res := p.runGitPod(p.gitPod(name, gitws.OpClone), claim); res.Kind != "" {
		p.t.Fatalf("clone: %+v", res)
	}
	p.readyReason(name, v1.ReasonWorkspaceReady)
	if edit {
		p.writeWorktree(claim, map[string]string{
			"calc.sh":           strings.Replace(gittest.Files["calc.sh"], "-", "+", 1),
			"NOTES.md":          "added by the agent\n",
			".toolgate/scratch": "not part of the change\n",
		})
	}
	return claim
}

func (p *pipelineEnv) writeWorktree(claim string, files map[string]string) {
	p.t.Helper()
	for path, text := range files {
		full := filepath.Join(claim, gitws.WorktreeDir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			p.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
}

// markDone sets spec.lifecycle Done, as the external agent's owner does when it finished.
func (p *pipelineEnv) markDone(task string) {
	p.t.Helper()
	obj := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: task}}
	if err := env.Client.Patch(p.t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"lifecycle":"Done"}}`))); err != nil {
		p.t.Fatal(err)
	}
}

// serverRefs are the refs of a repository on the test server.
func serverRefs(t *testing.T, repo gittest.Repo) string {
	t.Helper()
	return gittest.Git(t, repo.Dir, "for-each-ref", "--format=%(refname) %(objectname)")
}

// proposedPush waits for the task's git_push intent, once its change was read by
// the change pod (run here).
func (p *pipelineEnv) proposedPush(task, claim string) *v1.ToolIntent {
	p.t.Helper()
	if res := p.runGitPod(p.gitPod(task, gitws.OpChange), claim); res.Kind != "" {
		p.t.Fatalf("reading the change: %+v", res)
	}
	name := pipeline.PushIntentName(task)
	p.eventually("the push intent "+name, func() (bool, string) {
		err := env.Client.Get(p.t.Context(), client.ObjectKey{Namespace: p.ns, Name: name}, &v1.ToolIntent{})
		return err == nil, fmt.Sprintf("%v; task %+v", err, p.getTask(task).Status.Workspace)
	})
	return p.condition(name, v1.ConditionDecided, metav1.ConditionTrue, v1.ReasonPolicyAsk)
}

// A task with spec.workspace.git.push that would succeed does not: its change is
// read, a git_push call is proposed as the controller, asked for (Edit mode has no
// rule for it), and pushed once approved, as one commit on the new branch holding
// exactly the change; the task succeeds then, naming the commit.
func TestGitPushOnceApprovedCreatesTheBranch(t *testing.T) {
	p := startPipeline(t)
	server := gittest.NewServer(t)
	repo := server.AddRepo("calc")
	p.gitSecret("git-creds", server, server.Token, true)
	claim := p.pushTask("fix", repo, true)
	before := serverRefs(t, repo)

	p.markDone("fix")
	intent := p.proposedPush("fix", claim)
	var got *v1.AgentTask
	p.eventually("the task awaits the push's approval", func() (bool, string) {
		got = p.getTask("fix")
		return got.Status.Phase == v1.TaskAwaitingApproval && meta.IsStatusConditionTrue(got.Status.Conditions, v1.ConditionAwaitingApproval), fmt.Sprintf("%s %+v", got.Status.Phase, got.Status.Conditions)
	})
	if got.Status.Intents.Total != 0 {
		t.Fatalf("the push counts as an intent of the agent's: %+v", got.Status.Intents)
	}
	if owner := metav1.GetControllerOf(intent); owner == nil || owner.UID != got.UID || intent.Spec.RequestedBy != testOptions().identity() {
		t.Fatalf("the push is not the controller's for the task: %+v %s", intent.OwnerReferences, intent.Spec.RequestedBy)
	}
	var in tools.GitPushInput
	if err := json.Unmarshal(intent.Spec.Input.Raw, &in); err != nil {
		t.Fatal(err)
	}
	if in.URL != repo.URL || in.Branch != pushBranch || in.Base != repo.Second || in.FileCount != 2 || in.Secret != "git-creds" ||
		strings.Join(in.Files, ",") != "NOTES.md,calc.sh" || len(in.Tree) != 40 {
		t.Fatalf("the push's input does not say what is pushed where: %+v", in)
	}
	if intent.Status.Decision.Category != v1.CategoryNetwork {
		t.Fatalf("git_push is decided as %s, want network", intent.Status.Decision.Category)
	}
	a := p.approval(intent.Name)
	mustContain(t, "the approval's request", a.Spec.Request.Input, pushBranch, repo.URL, "NOTES.md", "calc.sh")
	if serverRefs(t, repo) != before {
		t.Fatal("something was pushed before the approval")
	}

	p.decide(intent.Name, v1.DecisionApproved, "bob", "looks right")
	pod := p.gitPod("fix", gitws.OpPush)
	if owner := metav1.GetControllerOf(pod); owner == nil || owner.Kind != "Execution" || owner.Name != intent.Name {
		t.Fatalf("the push pod is not the call's Execution's: %+v", pod.OwnerReferences)
	}
	mounts := 0
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "git-creds" {
			mounts++
		}
	}
	if mounts != 1 {
		t.Fatalf("the push pod does not mount the push's Secret: %+v", pod.Spec.Volumes)
	}
	// The pod that holds the credentials and the agent's change reaches the git
	// server alone: nothing else the agent's files could send them to.
	p.wantFencedToServer("the push pod", pod, server)
	if res := p.runGitPod(pod, claim); res.Kind != "" || res.Pushed == nil {
		t.Fatalf("the push failed: %+v", res)
	}
	done := p.finished("fix", v1.ConditionSucceeded, v1.ReasonMarkedDone)
	ps := done.Status.Workspace.Push
	if ps == nil || len(ps.Commit) != 40 || ps.IntentName != intent.Name || ps.Branch != pushBranch {
		t.Fatalf("status.workspace.push %+v", ps)
	}
	mustContain(t, "the Succeeded condition", meta.FindStatusCondition(done.Status.Conditions, v1.ConditionSucceeded).Message, "pushed as commit "+ps.Commit, pushBranch)

	// On the server: the branch, at a commit whose parent is the base, changing
	// exactly the agent's two files, with the goal and its origin in the message.
	if head := gittest.Git(t, repo.Dir, "rev-parse", "refs/heads/"+pushBranch); head != ps.Commit {
		t.Fatalf("branch %s is at %s, the task says %s", pushBranch, head, ps.Commit)
	}
	if parent := gittest.Git(t, repo.Dir, "rev-parse", ps.Commit+"^"); parent != repo.Second {
		t.Fatalf("the pushed commit's parent is %s, want the base %s", parent, repo.Second)
	}
	if files := gittest.Git(t, repo.Dir, "diff", "--name-only", repo.Second, ps.Commit); files != "NOTES.md\ncalc.sh" {
		t.Fatalf("the pushed commit changes %q", files)
	}
	if calc := gittest.Git(t, repo.Dir, "show", ps.Commit+":calc.sh"); calc+"\n" != strings.Replace(gittest.Files["calc.sh"], "-", "+", 1) {
		t.Fatalf("calc.sh on the branch: %q", calc)
	}
	msg := gittest.Git(t, repo.Dir, "log", "-1", "--format=%an <%ae>%n%B", ps.Commit)
	mustContain(t, "the pushed commit", msg, "AgentTask "+p.ns+"/fix", "Make the failing test pass.", "Toolgate-Task: "+p.ns+"/fix", "Toolgate-Approval: "+intent.Name)
	if refs := serverRefs(t, repo); strings.Count(refs, "\n") != strings.Count(before, "\n")+1 {
		t.Fatalf("the push moved other refs:\nbefore\n%s\nafter\n%s", before, refs)
	}
}

// A denied push leaves the server as it was, runs no push pod, and fails the task
// PushDenied, saying the change can still be exported; a push whose workspace
// changed after the approval pushes nothing; a task with no change succeeds with
// nothing pushed and no call proposed.
func TestGitPushDeniedOrChangedPushesNothing(t *testing.T) {
	p := startPipeline(t)
	server := gittest.NewServer(t)
	repo := server.AddRepo("calc")
	p.gitSecret("git-creds", server, server.Token, true)
	before := serverRefs(t, repo)

	claim := p.pushTask("denied", repo, true)
	p.markDone("denied")
	intent := p.proposedPush("denied", claim)
	p.approval(intent.Name)
	p.decide(intent.Name, v1.DecisionDenied, "bob", "not this branch")
	task := p.finished("denied", v1.ConditionFailed, v1.ReasonPushDenied)
	mustContain(t, "the Failed condition", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed).Message,
		"nothing was pushed", "kubectl toolgate export denied -o patch", string(v1.OutcomeApprovalDenied))
	p.absent(p.reconciledNow("agenttask", p.getTask("denied")), "a push pod for a denied push", func() bool {
		var pods corev1.PodList
		_ = env.Client.List(t.Context(), &pods, client.InNamespace(p.ns), client.MatchingLabels{"toolgate.dev/git": gitws.OpPush})
		return len(pods.Items) > 0
	})
	if refs := serverRefs(t, repo); refs != before {
		t.Fatalf("a denied push changed the server:\n%s", refs)
	}

	// Approved, then the workspace changes under the approval: the push pod finds
	// another tree than the one approved and pushes nothing.
	claim = p.pushTask("moved", repo, true)
	p.markDone("moved")
	intent = p.proposedPush("moved", claim)
	p.approval(intent.Name)
	p.decide(intent.Name, v1.DecisionApproved, "bob", "")
	pod := p.gitPod("moved", gitws.OpPush)
	p.writeWorktree(claim, map[string]string{"calc.sh": "rm -rf /\n"})
	if res := p.runGitPod(pod, claim); res.Kind != gitws.FailureChanged {
		t.Fatalf("a push of a tree that is not the approved one: %+v", res)
	}
	task = p.finished("moved", v1.ConditionFailed, v1.ReasonPushFailed)
	mustContain(t, "the Failed condition", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed).Message, "not the tree", "was shown for approval")
	if refs := serverRefs(t, repo); refs != before {
		t.Fatalf("a push of a changed workspace changed the server:\n%s", refs)
	}

	// No change: nothing to push, nothing proposed.
	claim = p.pushTask("idle", repo, false)
	p.writeWorktree(claim, map[string]string{".toolgate/notes": "scratch only\n"})
	p.markDone("idle")
	if res := p.runGitPod(p.gitPod("idle", gitws.OpChange), claim); res.Kind != "" {
		t.Fatalf("reading the change: %+v", res)
	}
	task = p.finished("idle", v1.ConditionSucceeded, v1.ReasonMarkedDone)
	mustContain(t, "the Succeeded condition", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionSucceeded).Message, "nothing was pushed")
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: pipeline.PushIntentName("idle")}, &v1.ToolIntent{}); err == nil {
		t.Fatal("a push was proposed for a workspace with no change")
	}
}

// Nobody but the controller proposes a push: a proposer of the task's is refused
// at validation, before policy (claiming the controller's identity is refused by
// admission: internal/admission), a git_push of the controller's that is not the
// task's push (another name, another branch) is refused too, and an intent
// squatting the push's name fails the task instead of standing for its push.
func TestGitPushOnlyTheControllerProposesIt(t *testing.T) {
	p := startPipeline(t)
	server := gittest.NewServer(t)
	repo := server.AddRepo("calc")
	p.gitSecret("git-creds", server, server.Token, true)
	p.pushTask("fix", repo, true)
	task := p.getTask("fix")

	input := fmt.Sprintf(`{"url":%q,"branch":%q,"secret":"git-creds","base":%q,"tree":%q,"fileCount":1,"files":["calc.sh"]}`,
		repo.URL, pushBranch, repo.Second, strings.Repeat("a", 40))
	// The task's own proposer.
	mine := p.propose("fix", 0, 0, v1.ToolGitPush, input)
	got := p.observed(mine.Name)
	if got.Status.Observation.Outcome != v1.OutcomeValidationFailed || got.Status.Decision != nil {
		t.Fatalf("a proposer's git_push: %+v", got.Status)
	}
	mustContain(t, "the refusal", got.Status.Observation.Summary, "git_push is toolgate's own step", testProposer)
	// Claiming the controller's identity, owned by the task: the input must still
	// be the task's own push (its url, branch, Secret and base).
	forged := &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "forged",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}},
		Spec: v1.ToolIntentSpec{
			TaskRef: v1.LocalObjectReference{Name: "fix"}, Tool: v1.ToolGitPush, RequestedBy: testOptions().identity(),
			Input: runtime.RawExtension{Raw: []byte(strings.Replace(input, pushBranch, "main", 1))},
		},
	}
	if err := env.Client.Create(t.Context(), forged); err != nil {
		t.Fatal(err)
	}
	got = p.observed("forged")
	if got.Status.Observation.Outcome != v1.OutcomeValidationFailed {
		t.Fatalf("a git_push to another branch than the task's: %+v", got.Status)
	}
	mustContain(t, "the refusal", got.Status.Observation.Summary, `input/branch: "main" is not the task's spec.workspace.git.push.branch`,
		"metadata.name: a task's push is ToolIntent fix-git-push")
	// A proposer's intent in the push's place is not the push: the task fails.
	squat := mine.DeepCopy()
	squat.ObjectMeta = metav1.ObjectMeta{Namespace: p.ns, Name: pipeline.PushIntentName("fix")}
	squat.Status = v1.ToolIntentStatus{}
	if err := env.Client.Create(t.Context(), squat); err != nil {
		t.Fatal(err)
	}
	p.observed(squat.Name)
	// One in the place of another task's push, naming its own task, fails that
	// task too (it would block the push's create for ever).
	other := mine.DeepCopy()
	other.ObjectMeta = metav1.ObjectMeta{Namespace: p.ns, Name: pipeline.PushIntentName("other")}
	other.Status = v1.ToolIntentStatus{}
	if err := env.Client.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	p.pushTask("other", repo, true)
	p.markDone("other")
	otherFailed := p.finished("other", v1.ConditionFailed, v1.ReasonPushFailed)
	mustContain(t, "the Failed condition", meta.FindStatusCondition(otherFailed.Status.Conditions, v1.ConditionFailed).Message, "is not this task's push (it names AgentTask fix and was requested by \""+testProposer+"\"")
	p.markDone("fix")
	failed := p.finished("fix", v1.ConditionFailed, v1.ReasonPushFailed)
	mustContain(t, "the Failed condition", meta.FindStatusCondition(failed.Status.Conditions, v1.ConditionFailed).Message, "is not this task's push")
	var pods corev1.PodList
	if err := env.Client.List(t.Context(), &pods, client.InNamespace(p.ns), client.MatchingLabels{"toolgate.dev/git": gitws.OpPush}); err != nil || len(pods.Items) > 0 {
		t.Fatalf("push pods: %d %v", len(pods.Items), err)
	}
}

// approvedPushRunning brings task "fix" to its approved push, whose pod is started
// and runs (no kubelet plays it).
func approvedPushRunning(p *pipelineEnv) (*v1.ToolIntent, *corev1.Pod) {
	p.t.Helper()
	server := gittest.NewServer(p.t)
	repo := server.AddRepo("calc")
	p.gitSecret("git-creds", server, server.Token, true)
	claim := p.pushTask("fix", repo, true)
	p.markDone("fix")
	intent := p.proposedPush("fix", claim)
	p.approval(intent.Name)
	p.decide(intent.Name, v1.DecisionApproved, "bob", "")
	return intent, p.gitPod("fix", gitws.OpPush)
}

// A task cancelled while its push pod runs stops the push: the pod is deleted, and
// the call's observation says whether the branch was made is unknown.
func TestGitPushStopsWhenTheTaskIsCancelled(t *testing.T) {
	p := startPipeline(t)
	intent, pod := approvedPushRunning(p)

	obj := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "fix"}}
	if err := env.Client.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"lifecycle":"Cancelled"}}`))); err != nil {
		t.Fatal(err)
	}
	p.finished("fix", v1.ConditionFailed, v1.ReasonCancelled)
	p.eventually("the push pod goes", func() (bool, string) {
		got := &corev1.Pod{}
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), got)
		return err != nil || !got.DeletionTimestamp.IsZero(), fmt.Sprint(err)
	})
	got := p.observed(intent.Name)
	mustContain(t, "the push's observation", got.Status.Observation.Summary, "ended while its push ran", "whether the branch was created is unknown")
}

// A push pod deleted by someone else while its task goes on is not started again (a
// second push could not tell its branch from another's): the observation says
// whether anything was pushed is unknown, and no other push pod starts.
func TestGitPushPodDeletedBeforeItReported(t *testing.T) {
	p := startPipeline(t)
	intent, pod := approvedPushRunning(p)
	p.eventually("the Execution records its push pod", func() (bool, string) {
		e := getExecution(t, p.ns, intent.Name)
		return e.Status.PodName == pod.Name, e.Status.PodName
	})
	if err := env.Client.Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	// Seen being deleted or already gone, the call is over with its effect unknown.
	got := p.observed(intent.Name)
	if o := got.Status.Observation; o.Outcome == v1.OutcomeSucceeded || !strings.Contains(o.Summary, pod.Name) || !strings.Contains(o.Summary, "unknown") {
		t.Fatalf("the push's observation: %+v", o)
	}
	p.absent(p.reconciledNow("execution", getExecution(t, p.ns, intent.Name)), "a second push pod", func() bool {
		var pods corev1.PodList
		if err := env.Client.List(t.Context(), &pods, client.InNamespace(p.ns)); err != nil {
			return false
		}
		for _, other := range pods.Items {
			if other.Name == pod.Name && other.UID != pod.UID {
				return true
			}
		}
		return false
	})
}

// A task that pushes runs nothing of the agent's while its change is read and
// pushed: its sessions and background jobs are stopped, and gone, before the change
// pod starts, and an intent the agent proposes afterwards (to turn the files
// harmless before the approver looks, or to put back what was read after the
// approval) is refused, saying which push is pending. Without that, an agent
// showed the approver one tree and had another pushed.
func TestGitPushStopsTheAgentBeforeItsChangeIsRead(t *testing.T) {
	p, l := startSessionPipeline(t)
	server := gittest.NewServer(t)
	repo := server.AddRepo("calc")
	p.gitSecret("git-creds", server, server.Token, true)
	task := p.gitTask("fix", repo.URL, "main", "git-creds", func(task *v1.AgentTask) {
		task.Spec.Mode = v1.ModeAuto
		task.Spec.Sandbox.Isolation = v1.IsolationSession
		task.Spec.Workspace.Git.Push = &v1.GitPush{Branch: pushBranch}
	})
	claim := l.workspace(pipeline.WorkspaceClaimName(task))
	if res := p.runGitPod(p.gitPod("fix", gitws.OpClone), claim); res.Kind != "" {
		t.Fatalf("clone: %+v", res)
	}
	p.readyReason("fix", v1.ReasonWorkspaceReady)
	calc := filepath.Join(claim, gitws.WorktreeDir, "calc.sh")

	// The agent's change, then a background job that outlives its call: in the
	// attack it waits to write the worktree again once the push is approved.
	p.propose("fix", 0, 0, v1.ToolBash, `{"command":"echo 'echo pwned' >> calc.sh"}`)
	if obs := p.observed("fix-t0-0").Status.Observation; obs.Outcome != v1.OutcomeSucceeded {
		t.Fatalf("the agent's change: %+v", obs)
	}
	p.propose("fix", 1, 0, v1.ToolBash, `{"command":"mkdir -p .toolgate && echo $$ > .toolgate/job.pid && exec sleep 300","runInBackground":true}`)
	p.observed("fix-t1-0")
	jobPid := 0
	p.eventually("the background job wrote its pid", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(claim, gitws.WorktreeDir, ".toolgate", "job.pid"))
		jobPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return jobPid > 0, fmt.Sprint(err)
	})
	if !processAlive(jobPid) {
		t.Fatal("the background job is not running")
	}

	p.markDone("fix")
	change := p.gitPod("fix", gitws.OpChange)
	// When the change pod starts, nothing of the agent's runs any more.
	var sessions corev1.PodList
	if err := env.Client.List(t.Context(), &sessions, client.InNamespace(p.ns), client.HasLabels{v1.LabelSession}); err != nil {
		t.Fatal(err)
	}
	if len(sessions.Items) > 0 {
		t.Fatalf("the push's change is read while %d session pod(s) of the task exist, the first %s", len(sessions.Items), sessions.Items[0].Name)
	}
	if processAlive(jobPid) {
		t.Fatalf("the push's change is read while the background job (pid %d) runs", jobPid)
	}
	if job := getExecution(t, p.ns, "fix-t1-0"); !executor.IsFinished(&job.Status) {
		t.Fatalf("the push's change is read while the background job's Execution runs: %+v", job.Status)
	}
	if res := p.runGitPod(change, claim); res.Kind != "" {
		t.Fatalf("reading the change: %+v", res)
	}
	p.eventually("the push intent", func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: pipeline.PushIntentName("fix")}, &v1.ToolIntent{})
		return err == nil, fmt.Sprint(err)
	})
	push := p.condition(pipeline.PushIntentName("fix"), v1.ConditionDecided, metav1.ConditionTrue, v1.ReasonPolicyAsk)
	shown, err := os.ReadFile(calc)
	if err != nil {
		t.Fatal(err)
	}
	p.eventually("the task waits for its push's approval", func() (bool, string) {
		got := p.getTask("fix")
		return got.Status.Phase == v1.TaskAwaitingApproval && got.Status.Workspace.Push.IntentName == push.Name, fmt.Sprintf("%s %+v", got.Status.Phase, got.Status.Workspace.Push)
	})

	// While the push waits for a human, the agent turns the files harmless: it is
	// refused, and told why.
	p.propose("fix", 2, 0, v1.ToolWriteFile, `{"path":"calc.sh","content":"echo harmless\n"}`)
	p.propose("fix", 2, 1, v1.ToolBash, `{"command":"sleep 5; echo harmless > calc.sh","runInBackground":true}`)
	for _, name := range []string{"fix-t2-0", "fix-t2-1"} {
		got := p.observed(name)
		if o := got.Status.Observation; o.Outcome != v1.OutcomeValidationFailed || o.Executed || got.Status.ExecutionName != "" {
			t.Fatalf("%s, proposed while the push is pending: %+v", name, got.Status)
		}
		mustContain(t, name+"'s refusal", got.Status.Observation.Summary,
			`AgentTask "fix" accepts no more intents: its push is pending: ToolIntent `+push.Name+" pushes its change to branch "+pushBranch,
			"until that push is approved, denied or the task cancelled")
	}
	p.absent(p.reconciledNow("agenttask", p.getTask("fix")), "a session of the pushing task", func() bool {
		var pods corev1.PodList
		_ = env.Client.List(t.Context(), &pods, client.InNamespace(p.ns), client.HasLabels{v1.LabelSession})
		return len(pods.Items) > 0
	})
	if now, err := os.ReadFile(calc); err != nil || string(now) != string(shown) {
		t.Fatalf("the worktree changed while the push waits (%v):\n%s", err, now)
	}
}

// runCLI runs kubectl toolgate's command code with args against the control plane,
// as the user of kubeconfig, in the test's namespace.
func (p *pipelineEnv) runCLI(kubeconfig, stdin string, args ...string) (stdout, stderr string, err error) {
	p.t.Helper()
	var out, errOut bytes.Buffer
	cmd := cli.NewRootCommand(genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append(args, "--kubeconfig", kubeconfig, "-n", p.ns))
	err = cmd.ExecuteContext(p.t.Context())
	return out.String(), errOut.String(), err
}

// The push's change is its own record, ConfigMap TASK-git-push: written once,
// immutable, of the tree the push intent binds. A diff asked for later reads the
// worktree as it is then into TASK-change and leaves the push's record alone;
// kubectl toolgate diff prints the push's record, with its tree, while the push is
// pending, and approve the same before it approves; and a worktree that is no
// longer that tree pushes nothing.
func TestGitPushShowsAndPushesOneRecordedTree(t *testing.T) {
	p := startPipeline(t)
	server := gittest.NewServer(t)
	repo := server.AddRepo("calc")
	p.gitSecret("git-creds", server, server.Token, true)
	claim := p.pushTask("fix", repo, true)
	before := serverRefs(t, repo)
	p.markDone("fix")
	intent := p.proposedPush("fix", claim)
	var in tools.GitPushInput
	if err := json.Unmarshal(intent.Spec.Input.Raw, &in); err != nil {
		t.Fatal(err)
	}
	task := p.getTask("fix")

	record := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: p.ns, Name: pipeline.PushRecordName("fix")}
	if err := env.Client.Get(t.Context(), key, record); err != nil {
		t.Fatalf("the push's record: %v", err)
	}
	var rec gitws.Record
	if err := json.Unmarshal([]byte(record.Data[gitws.RecordKey]), &rec); err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(record); owner == nil || owner.UID != task.UID || record.Immutable == nil || !*record.Immutable {
		t.Fatalf("the push's record is not the task's, immutable: %+v immutable=%v", record.OwnerReferences, record.Immutable)
	}
	if !rec.Complete || rec.Tree != in.Tree || rec.Base != in.Base || rec.FileCount != 2 || !strings.Contains(record.Data[gitws.DiffKey], "+added by the agent") {
		t.Fatalf("the push's record %+v is not the change the push binds (%+v):\n%s", rec, in, record.Data[gitws.DiffKey])
	}
	mustContain(t, "the push's reason", intent.Spec.Reason, "tree "+in.Tree, "ConfigMap "+key.Name)

	// The files are turned harmless (the agent's intents are refused; anyone with
	// the claim can still write it), and a diff is asked for: the read goes to the
	// task's change record, not to the push's.
	p.writeWorktree(claim, map[string]string{"NOTES.md": "harmless\n"})
	p.askForChange("fix", "r1")
	pushRead := executor.GitPodName(gitws.OpChange, string(task.UID), pushRequest(task))
	if res := p.runGitPod(p.gitPod("fix", gitws.OpChange, pushRead), claim); res.Kind != "" {
		t.Fatalf("reading the change: %+v", res)
	}
	if _, now := p.changeRecord("fix", "r1"); now.Tree == in.Tree {
		t.Fatalf("the read after the change has the push's tree %s", now.Tree)
	}
	after := &corev1.ConfigMap{}
	if err := env.Client.Get(t.Context(), key, after); err != nil || after.ResourceVersion != record.ResourceVersion || after.Data[gitws.DiffKey] != record.Data[gitws.DiffKey] {
		t.Fatalf("the push's record changed (%v): %s", err, after.Data[gitws.RecordKey])
	}
	// Nobody rewrites it: the API server refuses a change of its data.
	after.Data[gitws.DiffKey] = "+harmless\n"
	if err := env.Client.Update(t.Context(), after); !apierrors.IsInvalid(err) {
		t.Fatalf("an update of the push's record: %v, want it refused as immutable", err)
	}

	// What a person deciding the push is shown is that record: its tree, its diff.
	kubeconfig, err := env.AdminKubeconfig("push-approver", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := p.runCLI(kubeconfig, "", "diff", "fix")
	if err != nil {
		t.Fatalf("kubectl toolgate diff: %v\n%s", err, errOut)
	}
	mustContain(t, "diff's summary", errOut, "  tree "+in.Tree+"\n", "pending push: ToolIntent "+intent.Name+" pushes this tree, and no other, to branch "+pushBranch)
	mustContain(t, "diff", out, "+added by the agent")
	mustNotContain(t, "diff", out, "harmless")
	if got := p.getTask("fix"); got.Annotations[v1.AnnotationChangeRequest] != "r1" {
		t.Fatalf("diff asked for a new read while the push is pending: %q", got.Annotations[v1.AnnotationChangeRequest])
	}
	p.approval(intent.Name)
	out, errOut, err = p.runCLI(kubeconfig, "", "approve", intent.Name, "--yes")
	if err != nil {
		t.Fatalf("kubectl toolgate approve: %v\n%s", err, errOut)
	}
	mustContain(t, "approve", out, "Pushes:         tree "+in.Tree+" on "+in.Base, "  tree "+in.Tree+"\n", "+added by the agent", "Approval "+intent.Name+" approved by push-approver: 1 of 1 approvals; voted: push-approver (Approved); approved.")
	mustNotContain(t, "approve", out, "harmless")

	// The worktree is no longer the approved tree: the push pod pushes nothing.
	if res := p.runGitPod(p.gitPod("fix", gitws.OpPush), claim); res.Kind != gitws.FailureChanged {
		t.Fatalf("a push of a worktree that is not the approved tree: %+v", res)
	}
	p.finished("fix", v1.ConditionFailed, v1.ReasonPushFailed)
	if refs := serverRefs(t, repo); refs != before {
		t.Fatalf("the push changed the server:\n%s", refs)
	}
}
