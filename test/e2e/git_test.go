//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/gitws/gittest"
)

var gitServerImage = envOr("E2E_GITSERVER_IMAGE", "toolgate/gitserver:dev")

const gitToken = "e2e-git-token"

// gitServer starts hack/gitserver (git's own http-backend) in the namespace behind
// Service "git" on port 80, serving the sample repository as calc.git, and returns
// the sample's commits, which gittest.BuildSample gives wherever it runs.
func gitServer(ctx context.Context, ns string) gittest.Commits {
	GinkgoHelper()
	labels := map[string]string{"e2e-git": "server"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "git-server", Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "git", Image: gitServerImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Env: []corev1.EnvVar{{Name: "GIT_SERVER_TOKEN", Value: gitToken}},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
				VolumeMounts:   []corev1.VolumeMount{{Name: "repos", MountPath: "/repos"}},
			}},
			Volumes: []corev1.Volume{{Name: "repos", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	})).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		ready := false
		for _, c := range pod.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		g.Expect(ready).To(BeTrue(), "the git server is not ready: %+v", pod.Status)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	commits, err := gittest.BuildSample(filepath.Join(GinkgoT().TempDir(), "calc.git"))
	Expect(err).NotTo(HaveOccurred())
	return commits
}

// gitCredentials creates a Secret labelled for git with token.
func gitCredentials(ctx context.Context, ns, name, token string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{toolgatev1alpha1.LabelGitCredentials: "true"}},
		StringData: map[string]string{"username": "agent", "token": token},
	})).To(Succeed())
}

// hostGit runs git on this machine in dir and returns its output.
func hostGit(dir string, args ...string) string {
	GinkgoHelper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// toolgateCLI runs kubectl toolgate (in this process) and returns its stdout, its
// stderr and its exit code.
func toolgateCLI(ctx context.Context, args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := cli.Execute(ctx, args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return out.String(), errOut.String(), code
}

var _ = Describe("Git workspaces", func() {
	var ns, me string
	var commits gittest.Commits

	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		me = whoAmI(ctx)
		commits = gitServer(ctx, ns)
		gitCredentials(ctx, ns, "git-creds", gitToken)
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{{
				Name: "edit-and-test", Action: toolgatev1alpha1.RuleAllow,
				Match:  toolgatev1alpha1.RuleMatch{Tools: []toolgatev1alpha1.ToolName{toolgatev1alpha1.ToolBash, toolgatev1alpha1.ToolWriteFile}},
				Reason: "The spec's edits and commands are its own.",
			}}},
		})).To(Succeed())
	})

	gitTask := func(ctx SpecContext, name, revision, secret string, mutate ...func(*toolgatev1alpha1.AgentTask)) {
		GinkgoHelper()
		task := &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal: "Make the failing test pass\n\ncalc.sh subtracts where test.sh expects a sum.", Mode: toolgatev1alpha1.ModeEdit,
				Workspace: toolgatev1alpha1.WorkspaceSpec{
					VolumeClaim: &toolgatev1alpha1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")},
					Git:         &toolgatev1alpha1.GitSource{URL: "http://git/calc.git", Revision: revision, SecretRef: &toolgatev1alpha1.LocalObjectReference{Name: secret}},
				},
				Agent:   toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}}}},
				Budgets: toolgatev1alpha1.Budgets{MaxTurns: 20, MaxIntents: 20},
			},
		}
		for _, m := range mutate {
			m(task)
		}
		Expect(k8s.Create(ctx, task)).To(Succeed())
	}
	// ready waits for the task's Ready condition to have reason (True for
	// WorkspaceReady) and returns the task.
	ready := func(ctx SpecContext, name, reason string) *toolgatev1alpha1.AgentTask {
		GinkgoHelper()
		task := &toolgatev1alpha1.AgentTask{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, task)).To(Succeed())
			c := meta.FindStatusCondition(task.Status.Conditions, toolgatev1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(reason), "task %s: %s", name, c.Message)
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		return task
	}
	turn := int32(0)
	call := func(ctx SpecContext, task string, tool toolgatev1alpha1.ToolName, input map[string]any) *toolgatev1alpha1.ToolIntent {
		GinkgoHelper()
		turn++
		raw, err := json.Marshal(input)
		Expect(err).NotTo(HaveOccurred())
		intent := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: intentName(task, turn), Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{
				TaskRef: toolgatev1alpha1.LocalObjectReference{Name: task}, Turn: turn,
				Tool: tool, Input: runtime.RawExtension{Raw: raw}, RequestedBy: me,
			},
		}
		Expect(k8s.Create(ctx, intent)).To(Succeed())
		return observedIntent(ctx, intent)
	}

	It("clones at a branch, a tag and a commit from a real git server; a bad revision and a refused credential say which", func(ctx SpecContext) {
		gitCredentials(ctx, ns, "wrong-creds", "not-the-token")
		for name, revision := range map[string]string{"at-branch": "main", "at-tag": "v1", "at-commit": commits.Feature, "bad-revision": "no-such-branch"} {
			gitTask(ctx, name, revision, "git-creds")
		}
		gitTask(ctx, "bad-credential", "main", "wrong-creds")
		for name, want := range map[string][2]string{
			"at-branch": {commits.Second, "refs/heads/main"},
			"at-tag":    {commits.First, "refs/tags/v1"},
			"at-commit": {commits.Feature, ""},
		} {
			task := ready(ctx, name, toolgatev1alpha1.ReasonWorkspaceReady)
			Expect(task.Status.Workspace).NotTo(BeNil())
			Expect(task.Status.Workspace.Commit).To(Equal(want[0]), name)
			Expect(task.Status.Workspace.Ref).To(Equal(want[1]), name)
		}
		task := ready(ctx, "bad-revision", toolgatev1alpha1.ReasonGitRevisionNotFound)
		Expect(meta.FindStatusCondition(task.Status.Conditions, toolgatev1alpha1.ConditionReady).Message).To(ContainSubstring(`"no-such-branch" is not a branch, tag or commit`))
		task = ready(ctx, "bad-credential", toolgatev1alpha1.ReasonGitCredentialsRefused)
		Expect(meta.FindStatusCondition(task.Status.Conditions, toolgatev1alpha1.ConditionReady).Message).To(ContainSubstring("tried again when the Secret changes"))

		By("a call of a task whose clone failed waits; it is not failed")
		raw, _ := json.Marshal(map[string]any{"command": "cat calc.sh"})
		waiting := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: intentName("bad-revision", 1), Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{TaskRef: toolgatev1alpha1.LocalObjectReference{Name: "bad-revision"}, Turn: 1,
				Tool: toolgatev1alpha1.ToolBash, Input: runtime.RawExtension{Raw: raw}, RequestedBy: me},
		}
		Expect(k8s.Create(ctx, waiting)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)).To(Succeed())
			c := meta.FindStatusCondition(waiting.Status.Conditions, toolgatev1alpha1.ConditionExecuted)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(toolgatev1alpha1.ReasonWaitingForWorkspace))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(waiting.Status.Observation).To(BeNil())
	})

	It("shows an agent's edit in diff and export, and the patch applies with git am to a fresh clone", func(ctx SpecContext) {
		const task = "fix"
		gitTask(ctx, task, "main", "git-creds")
		ready(ctx, task, toolgatev1alpha1.ReasonWorkspaceReady)

		By("the tools see the worktree at /workspace, and not the git directory")
		obs := call(ctx, task, toolgatev1alpha1.ToolBash, map[string]any{"command": "ls -a; sh test.sh"}).Status.Observation
		Expect(obs.Summary).To(ContainSubstring("FAIL: 2 + 3 gave -1"))
		Expect(obs.Summary).NotTo(ContainSubstring(".git"))
		fixed := strings.Replace(gittest.Files["calc.sh"], "-", "+", 1)
		// A file is read before it is written (the runner's stale-write check).
		obs = call(ctx, task, toolgatev1alpha1.ToolReadFile, map[string]any{"path": "calc.sh"}).Status.Observation
		Expect(obs.Summary).To(ContainSubstring(gittest.Files["calc.sh"]))
		obs = call(ctx, task, toolgatev1alpha1.ToolWriteFile, map[string]any{"path": "calc.sh", "content": fixed}).Status.Observation
		Expect(obs.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), obs.Summary)
		obs = call(ctx, task, toolgatev1alpha1.ToolBash, map[string]any{"command": "sh test.sh; mkdir -p .toolgate; echo scratch > .toolgate/notes"}).Status.Observation
		Expect(obs.Summary).To(ContainSubstring("PASS: 2 + 3 = 5"))

		By("kubectl toolgate diff prints the change against the cloned commit")
		out, errOut, code := toolgateCLI(ctx, "diff", task, "-n", ns)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring("--- a/calc.sh\n+++ b/calc.sh"))
		Expect(out).To(ContainSubstring("-echo $(($1 - $2))\n+echo $(($1 + $2))"))
		Expect(out).NotTo(ContainSubstring(".toolgate"))
		Expect(errOut).To(ContainSubstring("1 file(s) changed against " + commits.Second[:12]))

		By("kubectl toolgate export -o patch applies with git am to a fresh clone")
		patch, errOut, code := toolgateCLI(ctx, "export", task, "-o", "patch", "-n", ns)
		Expect(code).To(Equal(0), errOut)
		Expect(patch).To(ContainSubstring("Subject: [PATCH] Make the failing test pass"))
		dir := GinkgoT().TempDir()
		_, err := gittest.BuildSample(filepath.Join(dir, "calc.git"))
		Expect(err).NotTo(HaveOccurred())
		hostGit(dir, "clone", "-q", filepath.Join(dir, "calc.git"), "fresh")
		fresh := filepath.Join(dir, "fresh")
		Expect(hostGit(fresh, "rev-parse", "HEAD")).To(Equal(commits.Second))
		Expect(os.WriteFile(filepath.Join(dir, "change.patch"), []byte(patch), 0o644)).To(Succeed())
		hostGit(fresh, "am", filepath.Join(dir, "change.patch"))
		got, err := os.ReadFile(filepath.Join(fresh, "calc.sh"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(got)).To(Equal(fixed))
		Expect(hostGit(fresh, "log", "-1", "--format=%an%n%s")).To(Equal("AgentTask " + ns + "/" + task + "\nMake the failing test pass"))
	})

	It("pushes the change once approved, as exactly that change on a new branch; a denied push leaves the server unchanged", func(ctx SpecContext) {
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "alice-approves", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-approver"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: alice}},
		})).To(Succeed())
		// serverGit runs git on the git server's own repository.
		serverGit := func(args ...string) string {
			GinkgoHelper()
			out, err := kubectl(ctx, append([]string{"-n", ns, "exec", "git-server", "--", "git", "--git-dir=/repos/calc.git"}, args...)...)
			Expect(err).NotTo(HaveOccurred())
			return strings.TrimSpace(out)
		}
		pushTo := func(branch string) func(*toolgatev1alpha1.AgentTask) {
			return func(t *toolgatev1alpha1.AgentTask) {
				t.Spec.Workspace.Git.Push = &toolgatev1alpha1.GitPush{Branch: branch}
			}
		}
		fixed := strings.Replace(gittest.Files["calc.sh"], "-", "+", 1)
		// finish makes the agent's change (calc.sh fixed, a scratch file under
		// .toolgate/), marks the task done, and returns its push, once asked.
		finish := func(task string) *toolgatev1alpha1.ToolIntent {
			GinkgoHelper()
			ready(ctx, task, toolgatev1alpha1.ReasonWorkspaceReady)
			call(ctx, task, toolgatev1alpha1.ToolReadFile, map[string]any{"path": "calc.sh"})
			obs := call(ctx, task, toolgatev1alpha1.ToolWriteFile, map[string]any{"path": "calc.sh", "content": fixed}).Status.Observation
			Expect(obs.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), obs.Summary)
			call(ctx, task, toolgatev1alpha1.ToolBash, map[string]any{"command": "mkdir -p .toolgate; echo scratch > .toolgate/notes"})
			_, err := kubectl(ctx, "-n", ns, "patch", "agenttask", task, "--type", "merge", "-p", `{"spec":{"lifecycle":"Done"}}`)
			Expect(err).NotTo(HaveOccurred())
			push := &toolgatev1alpha1.ToolIntent{}
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: task + "-git-push"}, push)).To(Succeed())
				g.Expect(push.Status.ApprovalName).NotTo(BeEmpty())
			}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
			Expect(push.Spec.Tool).To(Equal(toolgatev1alpha1.ToolGitPush))
			Expect(push.Status.Decision.Action).To(Equal(toolgatev1alpha1.DecisionAsk), "a push is asked for unless a rule says otherwise")
			return push
		}
		ended := func(task, typ, reason string) *toolgatev1alpha1.AgentTask {
			GinkgoHelper()
			t := &toolgatev1alpha1.AgentTask{}
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: task}, t)).To(Succeed())
				c := meta.FindStatusCondition(t.Status.Conditions, typ)
				g.Expect(c).NotTo(BeNil(), "%+v", t.Status.Conditions)
				g.Expect(c.Reason).To(Equal(reason), c.Message)
			}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
			return t
		}
		refs := serverGit("for-each-ref", "--format=%(refname) %(objectname)")

		By("a denied push: the task fails PushDenied and the server is unchanged")
		gitTask(ctx, "denied", "main", "git-creds", pushTo("agent/denied"))
		push := finish("denied")
		_, err := kubectl(ctx, "--as", alice, "-n", ns, "patch", "approval", push.Status.ApprovalName, "--type", "json",
			"-p", fmt.Sprintf(`[{"op":"add","path":"/spec/votes/-","value":{"user":%q,"decision":"Denied","comment":"not now"}}]`, alice))
		Expect(err).NotTo(HaveOccurred())
		task := ended("denied", toolgatev1alpha1.ConditionFailed, toolgatev1alpha1.ReasonPushDenied)
		Expect(meta.FindStatusCondition(task.Status.Conditions, toolgatev1alpha1.ConditionFailed).Message).To(ContainSubstring("nothing was pushed"))
		Expect(serverGit("for-each-ref", "--format=%(refname) %(objectname)")).To(Equal(refs), "a denied push changed the server")
		out, errOut, code := toolgateCLI(ctx, "export", "denied", "-o", "patch", "-n", ns)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring("+echo $(($1 + $2))"), "the change of a denied push is still exportable")

		By("an approved push: the branch holds one commit on the base with exactly the change")
		gitTask(ctx, "pushed", "main", "git-creds", pushTo("agent/fix"))
		push = finish("pushed")
		_, err = kubectl(ctx, "--as", alice, "-n", ns, "patch", "approval", push.Status.ApprovalName, "--type", "json",
			"-p", fmt.Sprintf(`[{"op":"add","path":"/spec/votes/-","value":{"user":%q,"decision":"Approved"}}]`, alice))
		Expect(err).NotTo(HaveOccurred())
		task = ended("pushed", toolgatev1alpha1.ConditionSucceeded, toolgatev1alpha1.ReasonMarkedDone)
		Expect(task.Status.Workspace.Push).NotTo(BeNil())
		commit := task.Status.Workspace.Push.Commit
		Expect(serverGit("rev-parse", "refs/heads/agent/fix")).To(Equal(commit))
		Expect(serverGit("rev-parse", commit+"^")).To(Equal(commits.Second))
		Expect(serverGit("diff", "--name-only", commits.Second, commit)).To(Equal("calc.sh"), "the push holds exactly the agent's change, no .toolgate/")
		Expect(serverGit("show", commit+":calc.sh") + "\n").To(Equal(fixed))
		Expect(serverGit("log", "-1", "--format=%an%n%s", commit)).To(Equal("AgentTask " + ns + "/pushed\nMake the failing test pass"))
		after := strings.Split(serverGit("for-each-ref", "--format=%(refname) %(objectname)"), "\n")
		Expect(after).To(ConsistOf(append(strings.Split(refs, "\n"), "refs/heads/agent/fix "+commit)), "the push moved other refs")
	})

	It("binds a push to the tree its approver is shown: the agent changes nothing while it is pending, diff shows its record, and that tree is what is pushed", func(ctx SpecContext) {
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "alice-approves", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-approver"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: alice}},
		})).To(Succeed())
		serverGit := func(args ...string) string {
			GinkgoHelper()
			out, err := kubectl(ctx, append([]string{"-n", ns, "exec", "git-server", "--", "git", "--git-dir=/repos/calc.git"}, args...)...)
			Expect(err).NotTo(HaveOccurred())
			return strings.TrimSpace(out)
		}
		const task = "bound"
		gitTask(ctx, task, "main", "git-creds", func(t *toolgatev1alpha1.AgentTask) {
			t.Spec.Workspace.Git.Push = &toolgatev1alpha1.GitPush{Branch: "agent/bound"}
		})
		ready(ctx, task, toolgatev1alpha1.ReasonWorkspaceReady)
		shown := strings.Replace(gittest.Files["calc.sh"], "-", "+", 1)
		call(ctx, task, toolgatev1alpha1.ToolReadFile, map[string]any{"path": "calc.sh"})
		obs := call(ctx, task, toolgatev1alpha1.ToolWriteFile, map[string]any{"path": "calc.sh", "content": shown}).Status.Observation
		Expect(obs.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), obs.Summary)
		_, err := kubectl(ctx, "-n", ns, "patch", "agenttask", task, "--type", "merge", "-p", `{"spec":{"lifecycle":"Done"}}`)
		Expect(err).NotTo(HaveOccurred())
		push := &toolgatev1alpha1.ToolIntent{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: task + "-git-push"}, push)).To(Succeed())
			g.Expect(push.Status.ApprovalName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		refs := serverGit("for-each-ref", "--format=%(refname) %(objectname)")

		By("the agent's edit while the push waits is refused, and runs nothing")
		obs = call(ctx, task, toolgatev1alpha1.ToolWriteFile, map[string]any{"path": "calc.sh", "content": "echo something else\n"}).Status.Observation
		Expect(obs.Outcome).NotTo(Equal(toolgatev1alpha1.OutcomeSucceeded), obs.Summary)
		Expect(obs.Summary).To(ContainSubstring("its push is pending"))

		By("the push's record is its own immutable ConfigMap, and diff shows it with its tree")
		var record corev1.ConfigMap
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: task + "-git-push"}, &record)).To(Succeed())
		Expect(record.Immutable).To(HaveValue(BeTrue()))
		var rec gitws.Record
		Expect(json.Unmarshal([]byte(record.Data[gitws.RecordKey]), &rec)).To(Succeed())
		Expect(rec.Tree).To(MatchRegexp("^[0-9a-f]{40}$"))
		out, errOut, code := toolgateCLI(ctx, "diff", task, "-n", ns)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring("+echo $(($1 + $2))"))
		Expect(out).NotTo(ContainSubstring("something else"))
		Expect(errOut).To(ContainSubstring("  tree " + rec.Tree))
		Expect(errOut).To(ContainSubstring("pending push: ToolIntent " + push.Name + " pushes this tree"))
		Expect(serverGit("for-each-ref", "--format=%(refname) %(objectname)")).To(Equal(refs), "nothing is pushed before the approval")

		By("once approved, the tree pushed is the tree shown")
		_, err = kubectl(ctx, "--as", alice, "-n", ns, "patch", "approval", push.Status.ApprovalName, "--type", "json",
			"-p", fmt.Sprintf(`[{"op":"add","path":"/spec/votes/-","value":{"user":%q,"decision":"Approved"}}]`, alice))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			t := &toolgatev1alpha1.AgentTask{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: task}, t)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(t.Status.Conditions, toolgatev1alpha1.ConditionSucceeded)).To(BeTrue(), "%+v", t.Status.Conditions)
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(serverGit("rev-parse", "refs/heads/agent/bound^{tree}")).To(Equal(rec.Tree))
	})

	It("replays a task's reads on a copy of its workspace: an unchanged file reads the same, a changed one shows the change; the task's workspace and intents are untouched", func(ctx SpecContext) {
		const task = "replayed"
		gitTask(ctx, task, "main", "git-creds")
		ready(ctx, task, toolgatev1alpha1.ReasonWorkspaceReady)
		read := call(ctx, task, toolgatev1alpha1.ToolReadFile, map[string]any{"path": "calc.sh"})
		cat := call(ctx, task, toolgatev1alpha1.ToolBash, map[string]any{"command": "cat test.sh"})
		for _, in := range []*toolgatev1alpha1.ToolIntent{read, cat} {
			Expect(in.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), in.Status.Observation.Summary)
			Expect(in.Status.Decision.Category).To(Equal(toolgatev1alpha1.CategoryReadOnly), in.Name)
		}

		// snapshot is what the replay must not touch: every intent of the task as
		// stored (its resourceVersion changes with any write), and the workspace's
		// change against its commit as diff reads it.
		snapshot := func() (map[string]string, string) {
			GinkgoHelper()
			var list toolgatev1alpha1.ToolIntentList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			intents := map[string]string{}
			for _, in := range list.Items {
				if in.Spec.TaskRef.Name == task {
					intents[in.Name] = in.ResourceVersion
				}
			}
			out, errOut, code := toolgateCLI(ctx, "diff", task, "-n", ns)
			Expect(code).To(Equal(0), errOut)
			return intents, out
		}
		// gone waits until nothing the replay made is left.
		gone := func() {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				var tasks toolgatev1alpha1.AgentTaskList
				g.Expect(k8s.List(ctx, &tasks, client.InNamespace(ns), client.MatchingLabels{toolgatev1alpha1.LabelReplayOf: task})).To(Succeed())
				g.Expect(tasks.Items).To(BeEmpty())
				var intents toolgatev1alpha1.ToolIntentList
				g.Expect(k8s.List(ctx, &intents, client.InNamespace(ns), client.MatchingLabels{toolgatev1alpha1.LabelReplayOf: task})).To(Succeed())
				g.Expect(intents.Items).To(BeEmpty())
				var claims corev1.PersistentVolumeClaimList
				g.Expect(k8s.List(ctx, &claims, client.InNamespace(ns))).To(Succeed())
				for _, c := range claims.Items {
					g.Expect(c.Name).NotTo(ContainSubstring("-replay-"), "the replay's workspace copy is left")
				}
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		}

		By("nothing changed since the reads: both replay the same")
		intentsBefore, diffBefore := snapshot()
		out, errOut, code := toolgateCLI(ctx, "replay", task, "--execute", "-n", ns, "-o", "json")
		Expect(code).To(Equal(0), "%s\n%s", out, errOut)
		var rep cli.ExecutionReplayReport
		Expect(json.Unmarshal([]byte(out), &rep)).To(Succeed())
		Expect(rep.Calls).To(HaveLen(2))
		for _, c := range rep.Calls {
			Expect(c.Comparison).To(Equal(cli.OutputSame), "%s: %v", c.Name, c.Differences)
			Expect(c.Replayed.SummarySHA256).To(Equal(c.Recorded.SummarySHA256))
		}
		Expect(rep.Calls[0].Replayed.ContentSHA256).To(Equal(read.Status.Observation.ContentSHA256))
		gone()
		intentsAfter, diffAfter := snapshot()
		Expect(intentsAfter).To(Equal(intentsBefore), "the replay changed the task's intents")
		Expect(diffAfter).To(Equal(diffBefore))

		By("the file changes after the read: the read replays changed, the write is not replayed")
		fixed := strings.Replace(gittest.Files["calc.sh"], "-", "+", 1)
		obs := call(ctx, task, toolgatev1alpha1.ToolWriteFile, map[string]any{"path": "calc.sh", "content": fixed}).Status.Observation
		Expect(obs.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), obs.Summary)
		intentsBefore, diffBefore = snapshot()
		Expect(diffBefore).To(ContainSubstring("+echo $(($1 + $2))"))
		out, errOut, code = toolgateCLI(ctx, "replay", task, "--execute", "-n", ns)
		Expect(code).To(Equal(1), "%s\n%s", out, errOut)
		Expect(out).To(ContainSubstring(fmt.Sprintf("! turn %d [0] read_file %s", read.Spec.Turn, read.Name)))
		Expect(out).To(ContainSubstring("CHANGED:  output the model saw differs"))
		Expect(out).To(ContainSubstring("CHANGED:  file content sha256"))
		Expect(out).To(ContainSubstring("+ $2))"))
		Expect(out).To(MatchRegexp(fmt.Sprintf(`(?m)^  turn %d \[0\] bash %s .*\n    Same \(as `, cat.Spec.Turn, cat.Name)))
		Expect(out).To(ContainSubstring("not replayed: not read-only (category Write)"))
		Expect(out).To(ContainSubstring("1 of 2 re-run call(s) changed; 1 call(s) not replayed."))
		Expect(errOut).To(ContainSubstring("deleted, with its workspace copy"))
		gone()
		intentsAfter, diffAfter = snapshot()
		Expect(intentsAfter).To(Equal(intentsBefore), "the replay changed the task's intents")
		Expect(diffAfter).To(Equal(diffBefore), "the replay changed the task's workspace")
	})
})
