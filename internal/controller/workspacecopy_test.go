package controller

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/gitws/gittest"
)

// copyTask creates an external task whose workspace is a copy of source's,
// without waiting for it to be Ready.
func (p *pipelineEnv) copyTask(name, source string) *v1.AgentTask {
	p.t.Helper()
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name},
		Spec: v1.AgentTaskSpec{
			Goal: "Replay the read-only calls of " + source + ".",
			Mode: v1.ModeEdit,
			Workspace: v1.WorkspaceSpec{
				VolumeClaim: &v1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")},
				CopyOf:      &v1.WorkspaceCopy{TaskRef: v1.LocalObjectReference{Name: source}},
			},
			Agent: v1.AgentSpec{External: externalAgent()},
		},
	}
	if err := env.Client.Create(p.t.Context(), task); err != nil {
		p.t.Fatalf("creating task: %v", err)
	}
	return task
}

// runCopyPod plays the kubelet for a copy pod, as runGitPod does for a git pod:
// claim stands for the task's claim, and claims holds the folders standing for
// the other claims of the namespace, by name. The claim the pod copies from is
// mounted as the pod mounts it: its subPath only, and only read-only.
func (p *pipelineEnv) runCopyPod(pod *corev1.Pod, claim string, claims map[string]string) gitws.Result {
	p.t.Helper()
	m := gitws.Mounts{Claim: claim}
	for _, vm := range pod.Spec.Containers[0].VolumeMounts {
		if vm.MountPath != gitws.PodCopySourceRoot {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name != vm.Name || v.PersistentVolumeClaim == nil {
				continue
			}
			if !vm.ReadOnly || !v.PersistentVolumeClaim.ReadOnly {
				p.t.Fatalf("the copy pod mounts claim %s read-write", v.PersistentVolumeClaim.ClaimName)
			}
			dir, ok := claims[v.PersistentVolumeClaim.ClaimName]
			if !ok {
				p.t.Fatalf("the copy pod mounts claim %s, which is not the one to copy", v.PersistentVolumeClaim.ClaimName)
			}
			m.CopySource = filepath.Join(dir, vm.SubPath)
		}
	}
	if m.CopySource == "" {
		p.t.Fatalf("the copy pod mounts no claim to copy at %s: %+v", gitws.PodCopySourceRoot, pod.Spec.Containers[0].VolumeMounts)
	}
	return p.runWorkspacePod(pod, m, func(log string) string { return log })
}

// failedWith waits for the task to be Failed with reason, Ready=False with it too.
func (p *pipelineEnv) failedWith(name, reason string) *v1.AgentTask {
	p.t.Helper()
	var task *v1.AgentTask
	p.eventually("task "+name+" Failed with "+reason, func() (bool, string) {
		task = p.getTask(name)
		failed := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed)
		ready := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady)
		return failed != nil && failed.Status == metav1.ConditionTrue && failed.Reason == reason &&
			ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == reason, fmt.Sprintf("%+v", task.Status.Conditions)
	})
	return task
}

// copyPods lists the task's copy pods.
func (p *pipelineEnv) copyPods(task string) []corev1.Pod {
	p.t.Helper()
	var pods corev1.PodList
	if err := env.Client.List(p.t.Context(), &pods, client.InNamespace(p.ns), client.MatchingLabels{v1.LabelGit: gitws.OpCopy, v1.LabelTask: task}); err != nil {
		p.t.Fatal(err)
	}
	return pods.Items
}

// wake changes the task's annotations, so that it is reconciled.
func (p *pipelineEnv) wake(task, value string) {
	p.t.Helper()
	p.annotateTask(task, "test.toolgate.dev/wake", value)
}

// A task copying a git task's workspace gets its worktree, the agent's change
// included, and never its git directory; its calls wait for the copy, which is
// made by a pod with a call's walls and no network, the other claim read-only,
// and made once.
func TestWorkspaceCopyOfAGitTaskIsItsWorktree(t *testing.T) {
	p := startPipeline(t)
	server := gittest.NewServer(t)
	repo := server.AddRepo("calc")
	p.gitSecret("git-creds", server, server.Token, true)
	p.gitTask("fix", repo.URL, "main", "git-creds")
	source := t.TempDir()
	if res := p.runGitPod(p.gitPod("fix", gitws.OpClone), source); res.Kind != "" {
		t.Fatalf("clone failed: %+v", res)
	}
	p.readyReason("fix", v1.ReasonWorkspaceReady)
	worktree := filepath.Join(source, gitws.WorktreeDir)
	if err := os.WriteFile(filepath.Join(worktree, "NOTES.md"), []byte("added by the agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("calc.sh", filepath.Join(worktree, "calc-link")); err != nil {
		t.Fatal(err)
	}

	task := p.copyTask("replay", "fix")
	intent := p.propose("replay", 0, 0, v1.ToolReadFile, `{"path":"calc.sh"}`)
	p.condition(intent.Name, v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonWaitingForWorkspace)
	pod := p.gitPod("replay", gitws.OpCopy)
	copying := p.readyReason("replay", v1.ReasonWorkspaceCopying)
	mustContain(t, "Ready message", meta.FindStatusCondition(copying.Status.Conditions, v1.ConditionReady).Message,
		"copying the workspace of AgentTask fix (claim fix-workspace) into claim replay-workspace (pod "+pod.Name+")")
	if p.executionExists(intent.Name) {
		t.Fatal("a call ran before the workspace was copied")
	}

	spec := pod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || !*spec.SecurityContext.RunAsNonRoot ||
		!*spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem {
		t.Fatalf("the copy pod lacks a call's walls: %+v", spec)
	}
	if owner := metav1.GetControllerOf(pod); owner == nil || owner.UID != task.UID {
		t.Fatalf("the copy pod is not the task's: %+v", pod.OwnerReferences)
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			t.Fatalf("the copy pod mounts Secret %s", v.Secret.SecretName)
		}
		if c := v.PersistentVolumeClaim; c != nil && c.ClaimName == "replay-workspace" && c.ReadOnly {
			t.Fatal("the copy pod cannot write its own claim")
		}
	}
	// No network at all: a fence with no egress rule.
	policy := &networkingv1.NetworkPolicy{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: "toolgate-net-" + pod.Labels[v1.LabelNetwork]}, policy); err != nil {
		t.Fatalf("no NetworkPolicy fences the copy pod: %v", err)
	}
	fencesEgress := false
	for _, pt := range policy.Spec.PolicyTypes {
		fencesEgress = fencesEgress || pt == networkingv1.PolicyTypeEgress
	}
	if len(policy.Spec.Egress) != 0 || !fencesEgress {
		t.Fatalf("the copy pod may reach the network: %+v", policy.Spec)
	}

	claim := t.TempDir()
	if res := p.runCopyPod(pod, claim, map[string]string{"fix-workspace": source}); res.Kind != "" {
		t.Fatalf("copy failed: %+v", res)
	}
	got := p.readyReason("replay", v1.ReasonWorkspaceReady)
	ws := got.Status.Workspace
	if ws == nil || ws.CopiedFrom != "fix-workspace" || ws.CopiedAt == nil || ws.CopyPodName != pod.Name || ws.Commit != "" {
		t.Fatalf("status.workspace %+v", ws)
	}
	mustContain(t, "Ready message", meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady).Message, "copied from claim fix-workspace of AgentTask fix")
	for rel, want := range map[string]string{"calc.sh": gittest.Files["calc.sh"], "NOTES.md": "added by the agent\n"} {
		if b, err := os.ReadFile(filepath.Join(claim, rel)); err != nil || string(b) != want {
			t.Errorf("the copy's %s: %q %v", rel, b, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(claim, "calc-link")); err != nil || target != "calc.sh" {
		t.Errorf("the copy's calc-link -> %q (%v), want a symlink to calc.sh", target, err)
	}
	// The tree tools see, and nothing of the git directory.
	for _, rel := range []string{gitws.GitDir, gitws.WorktreeDir, "HEAD", "objects", ".git"} {
		if _, err := os.Lstat(filepath.Join(claim, rel)); !os.IsNotExist(err) {
			t.Errorf("the copy holds %s: %v", rel, err)
		}
	}
	p.taskEvent("replay", EventWorkspaceCopied, "copied the workspace of AgentTask fix (claim fix-workspace) into replay-workspace")

	// The held call runs now, on the whole claim of the copy.
	p.eventually("the held call's Execution", func() (bool, string) { return p.executionExists(intent.Name), "" })
	exec := &v1.Execution{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: intent.Name}, exec); err != nil {
		t.Fatal(err)
	}
	if exec.Spec.Sandbox.WorkspaceClaimName != "replay-workspace" || exec.Spec.Sandbox.WorkspaceSubPath != "" {
		t.Fatalf("the call mounts %s/%s, want the whole replay-workspace", exec.Spec.Sandbox.WorkspaceClaimName, exec.Spec.Sandbox.WorkspaceSubPath)
	}

	// Copied once: the other task changes its worktree, this one is woken, and no
	// second copy is made.
	if err := os.WriteFile(filepath.Join(worktree, "LATER.md"), []byte("after the copy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.wake("fix", "1")
	p.absent(p.reconciledNow("agenttask", p.getTask("replay")), "a second copy", func() bool { return len(p.copyPods("replay")) != 1 })
	if again := p.getTask("replay"); !again.Status.Workspace.CopiedAt.Equal(ws.CopiedAt) {
		t.Fatalf("copiedAt moved from %v to %v", ws.CopiedAt, again.Status.Workspace.CopiedAt)
	}
}

// A task copying a plain claim's task gets the whole claim as its tools saw it:
// files with their modes, and what is no file, folder or symlink left out and
// counted.
func TestWorkspaceCopyOfAPlainClaimTask(t *testing.T) {
	p := startPipeline(t)
	p.task("plain", v1.ModeEdit)
	source := t.TempDir()
	for rel, m := range map[string]fs.FileMode{"main.go": 0o644, "bin/run.sh": 0o755} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(source, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(source, rel), []byte(rel+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(source, rel), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(source, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}

	p.copyTask("copy", "plain")
	pod := p.gitPod("copy", gitws.OpCopy)
	claim := t.TempDir()
	if res := p.runCopyPod(pod, claim, map[string]string{"plain-workspace": source}); res.Kind != "" {
		t.Fatalf("copy failed: %+v", res)
	}
	got := p.readyReason("copy", v1.ReasonWorkspaceReady)
	if ws := got.Status.Workspace; ws == nil || ws.CopiedFrom != "plain-workspace" || ws.CopySkipped != 1 {
		t.Fatalf("status.workspace %+v, want a copy of plain-workspace with 1 entry left out", ws)
	}
	mustContain(t, "Ready message", meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady).Message,
		"copied from claim plain-workspace of AgentTask plain", "(1 entries that are no regular file, directory or symlink, or could not be read, were left out)")
	for rel, want := range map[string]fs.FileMode{"main.go": 0o644, "bin/run.sh": 0o755} {
		info, err := os.Lstat(filepath.Join(claim, rel))
		if err != nil || info.Mode() != want {
			t.Errorf("the copy's %s: %v %v, want mode %v", rel, info, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(claim, "pipe")); !os.IsNotExist(err) {
		t.Errorf("the FIFO was copied: %v", err)
	}
}

// A copy waits, Ready=False, for a task that does not exist yet, one that is still
// cloning, and one whose claim does not exist yet; each appearing wakes it.
func TestWorkspaceCopyWaitsForItsSource(t *testing.T) {
	p := startPipeline(t)

	t.Run("a task created later, and cloning", func(t *testing.T) {
		p.copyTask("replay", "later")
		task := p.readyReason("replay", v1.ReasonCopySourceNotFound)
		mustContain(t, "Ready message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady).Message,
			"AgentTask later, named by spec.workspace.copyOf.taskRef, does not exist in namespace "+p.ns+"; the copy waits for it")
		if failed := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed); failed == nil || failed.Status != metav1.ConditionFalse {
			t.Fatalf("a task waiting for its source failed: %+v", failed)
		}
		p.absent(p.reconciledNow("agenttask", p.getTask("replay")), "a copy pod before its source exists", func() bool { return len(p.copyPods("replay")) > 0 })

		server := gittest.NewServer(t)
		repo := server.AddRepo("calc")
		p.gitSecret("later-creds", server, server.Token, true)
		p.gitTask("later", repo.URL, "main", "later-creds")
		task = p.readyReason("replay", v1.ReasonCopySourceNotReady)
		mustContain(t, "Ready message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady).Message, "AgentTask later has not finished seeding its workspace")
		if pods := p.copyPods("replay"); len(pods) > 0 {
			t.Fatalf("a copy pod while the source clones: %s", pods[0].Name)
		}

		source := t.TempDir()
		if res := p.runGitPod(p.gitPod("later", gitws.OpClone), source); res.Kind != "" {
			t.Fatalf("clone failed: %+v", res)
		}
		claim := t.TempDir()
		if res := p.runCopyPod(p.gitPod("replay", gitws.OpCopy), claim, map[string]string{"later-workspace": source}); res.Kind != "" {
			t.Fatalf("copy failed: %+v", res)
		}
		p.readyReason("replay", v1.ReasonWorkspaceReady)
		if b, err := os.ReadFile(filepath.Join(claim, "calc.sh")); err != nil || string(b) != gittest.Files["calc.sh"] {
			t.Fatalf("the copy's calc.sh: %q %v", b, err)
		}
	})

	t.Run("a claim created later", func(t *testing.T) {
		byo := &v1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "byo"},
			Spec: v1.AgentTaskSpec{
				Goal: "work on a claim of mine", Mode: v1.ModeEdit,
				Workspace: v1.WorkspaceSpec{ExistingClaim: "mine"},
				Agent:     v1.AgentSpec{External: externalAgent()},
			},
		}
		if err := env.Client.Create(t.Context(), byo); err != nil {
			t.Fatal(err)
		}
		p.copyTask("byo-copy", "byo")
		task := p.readyReason("byo-copy", v1.ReasonCopySourceNotReady)
		mustContain(t, "Ready message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady).Message, "the claim mine of AgentTask byo does not exist yet")
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "mine"},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if err := env.Client.Create(t.Context(), pvc); err != nil {
			t.Fatal(err)
		}
		// The claim's creation wakes the task that names it, which wakes its copy.
		p.readyReason("byo", v1.ReasonWorkspaceReady)
		source := t.TempDir()
		if err := os.WriteFile(filepath.Join(source, "mine.txt"), []byte("mine\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		claim := t.TempDir()
		if res := p.runCopyPod(p.gitPod("byo-copy", gitws.OpCopy), claim, map[string]string{"mine": source}); res.Kind != "" {
			t.Fatalf("copy failed: %+v", res)
		}
		p.readyReason("byo-copy", v1.ReasonWorkspaceReady)
		if b, err := os.ReadFile(filepath.Join(claim, "mine.txt")); err != nil || string(b) != "mine\n" {
			t.Fatalf("the copy's mine.txt: %q %v", b, err)
		}
	})
}

// A copy that can never be made fails the task, saying why: the task names
// itself, the copy pod failed, or it ended without a result. A failed copy is
// not tried again.
func TestWorkspaceCopyFailuresFailTheTask(t *testing.T) {
	p := startPipeline(t)
	p.task("plain", v1.ModeEdit)

	t.Run("the task itself", func(t *testing.T) {
		p.copyTask("self", "self")
		task := p.failedWith("self", v1.ReasonCopySourceUnusable)
		mustContain(t, "Failed message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed).Message,
			"spec.workspace.copyOf.taskRef names the task itself")
		if pods := p.copyPods("self"); len(pods) > 0 {
			t.Fatalf("a copy pod for a task copying itself: %s", pods[0].Name)
		}
	})

	t.Run("the copy fails", func(t *testing.T) {
		p.copyTask("broken", "plain")
		intent := p.propose("broken", 0, 0, v1.ToolReadFile, `{"path":"main.go"}`)
		pod := p.gitPod("broken", gitws.OpCopy)
		// The kubelet mounted nothing where the claim to copy should be.
		res := p.runCopyPod(pod, t.TempDir(), map[string]string{"plain-workspace": filepath.Join(t.TempDir(), "not-mounted")})
		if res.Kind == "" {
			t.Fatalf("a copy of nothing succeeded: %+v", res)
		}
		task := p.failedWith("broken", v1.ReasonWorkspaceCopyFailed)
		mustContain(t, "Failed message", meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed).Message,
			"copying the workspace of AgentTask plain (claim plain-workspace) with pod "+pod.Name+" failed: the workspace to copy cannot be opened")
		p.taskEvent("broken", EventTaskFailed, "WorkspaceCopyFailed: copying the workspace of AgentTask plain")
		if p.executionExists(intent.Name) {
			t.Fatal("a call of a task whose copy failed ran")
		}
	})

	t.Run("the pod ends without a result", func(t *testing.T) {
		p.copyTask("killed", "plain")
		pod := p.gitPod("killed", gitws.OpCopy)
		setPodStatus(t, pod, corev1.PodFailed, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}})
		task := p.failedWith("killed", v1.ReasonWorkspaceCopyFailed)
		msg := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed).Message
		mustContain(t, "Failed message", msg, "the copy pod "+pod.Name+" ended without a result", "exit code 137, reason OOMKilled")
		// Failed for good: the pod gone, no copy is tried again.
		p.seenByController("killed", "Failed", func(got *v1.AgentTask) bool {
			return meta.IsStatusConditionTrue(got.Status.Conditions, v1.ConditionFailed)
		})
		if err := env.Client.Delete(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		p.absent(p.reconciledNow("agenttask", p.getTask("killed")), "a copy tried again after the task failed", func() bool {
			for _, pod := range p.copyPods("killed") {
				if pod.DeletionTimestamp.IsZero() {
					return true
				}
			}
			return false
		})
		if c := meta.FindStatusCondition(p.getTask("killed").Status.Conditions, v1.ConditionFailed); c == nil || c.Message != msg {
			t.Fatalf("the failure changed to %+v", c)
		}
	})
}

// A claim of the name a task's own claim would have, made by someone else (one
// that other tasks use as existingClaim, say), is never the task's: whoever may
// create a task would otherwise have the copy pod (or a clone) write into it
// before any call is decided. The task waits, Ready=False saying why, with no copy
// pod, and goes on with a claim of its own once that claim is gone.
func TestATaskNeverWritesIntoAClaimNotItsOwn(t *testing.T) {
	p := startPipeline(t)
	shared := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "shared-workspace"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := env.Client.Create(t.Context(), shared); err != nil {
		t.Fatal(err)
	}
	p.task("plain", v1.ModeEdit)
	p.readyReason("plain", v1.ReasonWorkspaceReady)
	p.copyTask("shared", "plain")
	task := p.readyReason("shared", v1.ReasonWorkspaceClaimNotOwned)
	ready := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady)
	mustContain(t, "the Ready message", ready.Message, "PersistentVolumeClaim shared-workspace exists and is not this task's", "delete the claim")
	p.absent(p.reconciledNow("agenttask", p.getTask("shared")), "a copy pod into a claim not the task's", func() bool { return len(p.copyPods("shared")) > 0 })

	// The claim goes (the test plays the PVC protection controller): the task
	// makes its own and copies into that.
	if err := env.Client.Delete(t.Context(), shared); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	if err := env.Client.Patch(t.Context(), shared, patch); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	p.eventually("a copy pod into the task's own claim", func() (bool, string) {
		pods := p.copyPods("shared")
		if len(pods) == 0 {
			return false, "no copy pod"
		}
		own := &corev1.PersistentVolumeClaim{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.ns, Name: "shared-workspace"}, own); err != nil {
			return false, err.Error()
		}
		return metav1.IsControlledBy(own, p.getTask("shared")), fmt.Sprintf("the claim's owners: %+v", own.OwnerReferences)
	})
}
