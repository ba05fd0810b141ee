package executor

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/workspace"
)

// A git pod has a tool call's walls, mounts the whole claim at the claim root (the
// git directory too), and the credentials Secret only when asked, read-only.
func TestGitPodHasTheWallsOfACall(t *testing.T) {
	network := toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "10.1.2.3/32", Ports: []int32{443}}}}
	for _, tt := range []struct {
		op       string
		secret   string
		readOnly bool
	}{{gitws.OpClone, "repo-creds", false}, {gitws.OpChange, "", true}} {
		pod, err := BuildGitPod(GitPod{
			Namespace: "team-a", Name: GitPodName(tt.op, "fix-bug", "c1"), Task: "fix-bug",
			ClaimName: "fix-bug-workspace", ReadOnlyClaim: tt.readOnly, SecretName: tt.secret, Network: network,
			Request: gitws.Request{Op: tt.op, URL: "https://git.example.test/r.git", Revision: "main"},
		}, testRunnerImage)
		if err != nil {
			t.Fatal(err)
		}
		spec := pod.Spec
		tool := spec.Containers[0]
		mounts := map[string]bool{}
		var claim, creds bool
		for _, m := range tool.VolumeMounts {
			mounts[m.MountPath] = m.ReadOnly
			if m.MountPath == gitws.PodClaimRoot {
				claim = m.SubPath == "" && m.ReadOnly == tt.readOnly
			}
			if m.MountPath == gitws.PodCredentialsDir {
				creds = m.ReadOnly
			}
		}
		var secretVolume bool
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				secretVolume = v.Secret.SecretName == tt.secret && ptr.Deref(v.Secret.DefaultMode, 0o777)&0o007 == 0
			}
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName != "fix-bug-workspace" {
				t.Errorf("%s: claim %s", tt.op, v.PersistentVolumeClaim.ClaimName)
			}
		}
		var request gitws.Request
		if len(tool.Env) != 1 || tool.Env[0].Name != gitws.RequestEnv || json.Unmarshal([]byte(tool.Env[0].Value), &request) != nil {
			t.Fatalf("%s: env %v", tt.op, tool.Env)
		}
		checks := map[string]bool{
			"no token":                   !ptr.Deref(spec.AutomountServiceAccountToken, true),
			"no service links":           !ptr.Deref(spec.EnableServiceLinks, true),
			"non-root":                   ptr.Deref(spec.SecurityContext.RunAsNonRoot, false) && ptr.Deref(spec.SecurityContext.RunAsUser, 0) == SandboxUID,
			"seccomp":                    spec.SecurityContext.SeccompProfile.Type == "RuntimeDefault",
			"read-only root":             ptr.Deref(tool.SecurityContext.ReadOnlyRootFilesystem, false),
			"drop ALL":                   len(tool.SecurityContext.Capabilities.Drop) == 1 && tool.SecurityContext.Capabilities.Drop[0] == "ALL",
			"no privilege escalation":    !ptr.Deref(tool.SecurityContext.AllowPrivilegeEscalation, true),
			"resource limits":            !tool.Resources.Limits.Memory().IsZero(),
			"runs once":                  spec.RestartPolicy == "Never",
			"a deadline":                 ptr.Deref(spec.ActiveDeadlineSeconds, 0) > 0,
			"runs the runner's git":      tool.Image == testRunnerImage && strings.Join(tool.Command, " ") == RunnerPath+" git",
			"whole claim at claim root":  claim,
			"not mounted at /workspace":  !hasKey(mounts, workspace.Root),
			"the request is the env":     request.Op == tt.op && request.URL == "https://git.example.test/r.git",
			"secret mounted when asked":  (tt.secret != "") == creds && (tt.secret != "") == secretVolume,
			"labelled git, task, fence":  pod.Labels[toolgatev1alpha1.LabelGit] == tt.op && pod.Labels[toolgatev1alpha1.LabelTask] == "fix-bug" && pod.Labels[toolgatev1alpha1.LabelNetwork] == networkKey(network),
			"named for admission policy": strings.HasPrefix(pod.Name, "toolgate-git-"+tt.op+"-"),
		}
		for name, ok := range checks {
			if !ok {
				t.Errorf("%s pod: %s: not so", tt.op, name)
			}
		}
	}
	if _, err := BuildGitPod(GitPod{Name: "x", ClaimName: "c"}, ""); err == nil {
		t.Error("a git pod without a runner image was built")
	}
}

func TestGitPodNameIsADNSLabelPerKey(t *testing.T) {
	long := strings.Repeat("t", 253)
	a, b := GitPodName(gitws.OpClone, long, "c1"), GitPodName(gitws.OpClone, long, "c2")
	if a == b || len(a) > 63 || a != GitPodName(gitws.OpClone, long, "c1") {
		t.Errorf("names %s %s", a, b)
	}
	// The key's parts are separated: ("ab","c") is not ("a","bc").
	if GitPodName("clone", "ab", "c") == GitPodName("clone", "a", "bc") {
		t.Error("key parts run together")
	}
}

// A git task's tools mount its worktree only, in a Job and in a session pod alike:
// the git directory beside it is out of every tool's reach.
func TestWorkspaceSubPathMountsTheWorktreeOnly(t *testing.T) {
	exec := makeExecution("e1").Tool(toolgatev1alpha1.ToolReadFile, `{"path":"a"}`).Obj()
	exec.Spec.Sandbox.WorkspaceSubPath = gitws.WorktreeDir
	job, err := BuildJob(exec, testRunnerImage)
	if err != nil {
		t.Fatal(err)
	}
	session, err := BuildSessionPod(exec.Namespace, ExecutionSessionOf(exec), testRunnerImage)
	if err != nil {
		t.Fatal(err)
	}
	for kind, containers := range map[string][]corev1.Container{"job": job.Spec.Template.Spec.Containers, "session": session.Spec.Containers} {
		var found bool
		for _, m := range containers[0].VolumeMounts {
			if m.MountPath == workspace.Root {
				found = m.SubPath == gitws.WorktreeDir
			}
		}
		if !found {
			t.Errorf("%s: /workspace is not the claim's %s folder", kind, gitws.WorktreeDir)
		}
	}
}

func hasKey(m map[string]bool, k string) bool { _, ok := m[k]; return ok }

// A copy pod has a git pod's walls and no network; it mounts the claim it copies
// into read-write and, read-only, only the folder of the other task's claim that
// task's tools see (so a git task's git directory is not even in the pod).
func TestCopyPodMountsTheWorkspaceCopiedFromReadOnly(t *testing.T) {
	pod, err := BuildGitPod(GitPod{
		Namespace: "team-a", Name: GitPodName(gitws.OpCopy, "replay", "fix-bug"), Task: "replay",
		ClaimName: "replay-workspace", Network: toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkNone},
		CopySourceClaim: "fix-bug-workspace", CopySourceSubPath: gitws.WorktreeDir,
		Request: gitws.Request{Op: gitws.OpCopy},
	}, testRunnerImage)
	if err != nil {
		t.Fatal(err)
	}
	tool := pod.Spec.Containers[0]
	claims := map[string]corev1.PersistentVolumeClaimVolumeSource{}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			t.Errorf("the copy pod mounts Secret %s", v.Secret.SecretName)
		}
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = *v.PersistentVolumeClaim
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range tool.VolumeMounts {
		mounts[m.MountPath] = m
	}
	into, from := mounts[gitws.PodClaimRoot], mounts[gitws.PodCopySourceRoot]
	checks := map[string]bool{
		"two claims":                       len(claims) == 2,
		"its claim read-write, whole":      claims[into.Name].ClaimName == "replay-workspace" && !claims[into.Name].ReadOnly && !into.ReadOnly && into.SubPath == "",
		"the other claim read-only":        claims[from.Name].ClaimName == "fix-bug-workspace" && claims[from.Name].ReadOnly && from.ReadOnly,
		"only the other task's /workspace": from.SubPath == gitws.WorktreeDir,
		"no token":                         !ptr.Deref(pod.Spec.AutomountServiceAccountToken, true),
		"non-root":                         ptr.Deref(pod.Spec.SecurityContext.RunAsNonRoot, false),
		"seccomp":                          pod.Spec.SecurityContext.SeccompProfile.Type == "RuntimeDefault",
		"read-only root":                   ptr.Deref(tool.SecurityContext.ReadOnlyRootFilesystem, false),
		"drop ALL":                         len(tool.SecurityContext.Capabilities.Drop) == 1 && tool.SecurityContext.Capabilities.Drop[0] == "ALL",
		"resource limits":                  !tool.Resources.Limits.Memory().IsZero(),
		"no network":                       pod.Labels[toolgatev1alpha1.LabelNetwork] == networkKey(toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkNone}),
		"labelled copy":                    pod.Labels[toolgatev1alpha1.LabelGit] == gitws.OpCopy,
		"named for admission policy":       strings.HasPrefix(pod.Name, "toolgate-git-copy-"),
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("copy pod: %s: not so", name)
		}
	}
	policy, err := GitNetworkPolicy("team-a", toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkNone})
	if err != nil || len(policy.Spec.Egress) != 0 || len(policy.Spec.PolicyTypes) != 2 {
		t.Errorf("the copy pod's fence lets traffic out: %+v %v", policy, err)
	}
}
