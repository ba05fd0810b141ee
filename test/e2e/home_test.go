//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// What a call may write is the workspace, and only the workspace: a claim its user
// made is writable by the sandbox's user, and nothing the agent writes there is
// read as the configuration of a later call's programs (HOME is not the workspace).
var _ = Describe("The workspace a call writes", func() {
	for _, isolation := range []toolgatev1alpha1.SandboxIsolation{toolgatev1alpha1.IsolationPerCall, toolgatev1alpha1.IsolationSession} {
		Context("with isolation "+string(isolation), func() { workspaceWriteSpecs(isolation) })
	}
})

func workspaceWriteSpecs(isolation toolgatev1alpha1.SandboxIsolation) {
	const (
		task     = "home"
		approver = "alice"
		planted  = "planted-by-the-agent"
	)
	var ns, claim, me string

	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		// The claim is the user's own, made by the cluster's provisioner, and nothing
		// has written to it before the task's first call.
		claim = newWorkspace(ctx, ns)
		me = whoAmI(ctx)
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "alice-approves", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-approver"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: approver}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "home", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{
				{
					Name: "git-needs-a-person", Action: toolgatev1alpha1.RuleAsk,
					Match:     toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("git")}},
					Reason:    "A person looks at every git command.",
					Approvers: toolgatev1alpha1.Approvers{Users: []string{approver}},
				},
				{
					Name: "writes", Action: toolgatev1alpha1.RuleAllow,
					Match:  toolgatev1alpha1.RuleMatch{Tools: []toolgatev1alpha1.ToolName{toolgatev1alpha1.ToolWriteFile}},
					Reason: "The task writes its workspace.",
				},
			}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: task, Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal:      "Write into the workspace.",
				Mode:      toolgatev1alpha1.ModeEdit,
				Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
				Sandbox:   toolgatev1alpha1.SandboxSpec{Isolation: isolation},
				Agent:     toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}}}},
			},
		})).To(Succeed())
	})

	propose := func(ctx SpecContext, turn int32, tool toolgatev1alpha1.ToolName, input map[string]any) *toolgatev1alpha1.ToolIntent {
		GinkgoHelper()
		raw, err := json.Marshal(input)
		Expect(err).NotTo(HaveOccurred())
		intent := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: intentName(task, turn), Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{
				TaskRef: toolgatev1alpha1.LocalObjectReference{Name: task},
				Turn:    turn, Tool: tool, Input: runtime.RawExtension{Raw: raw}, RequestedBy: me,
			},
		}
		Expect(k8s.Create(ctx, intent)).To(Succeed())
		return intent
	}
	succeeded := func(intent *toolgatev1alpha1.ToolIntent) {
		GinkgoHelper()
		Expect(intent.Status.Observation).NotTo(BeNil())
		Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), "%s: %s", intent.Name, intent.Status.Observation.Summary)
	}

	It("writes into a claim the user made, after a read-only call mounted it first", func(ctx SpecContext) {
		By("a read-only call: the claim's first mount is read-only")
		succeeded(observedIntent(ctx, propose(ctx, 1, toolgatev1alpha1.ToolListDir, map[string]any{"path": "."})))
		By("a write_file succeeds as the sandbox's user")
		succeeded(observedIntent(ctx, propose(ctx, 2, toolgatev1alpha1.ToolWriteFile, map[string]any{"path": "made.txt", "content": "made by a call\n"})))
		Expect(workspaceFiles(ctx, ns, claim, "made.txt")).To(HaveKeyWithValue("made.txt", "made by a call\n"))
	})

	It("gives each call a HOME outside the workspace, so a .gitconfig the agent wrote does not reach an approved git call", func(ctx SpecContext) {
		By("the agent writes a .gitconfig into the workspace")
		succeeded(observedIntent(ctx, propose(ctx, 1, toolgatev1alpha1.ToolWriteFile, map[string]any{
			"path": ".gitconfig", "content": fmt.Sprintf("[user]\n\tname = %s\n", planted),
		})))

		By("a git call waits for a person, who approves it")
		git := propose(ctx, 2, toolgatev1alpha1.ToolBash, map[string]any{
			"command": `echo "HOME=$HOME"; git config --global --get user.name; echo "git-exit=$?"`,
		})
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(git), git)).To(Succeed())
			g.Expect(git.Status.ApprovalName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		_, err := kubectl(ctx, "--as", approver, "-n", ns, "patch", "approval", git.Status.ApprovalName, "--type", "json",
			"-p", fmt.Sprintf(`[{"op":"add","path":"/spec/votes/-","value":{"user":%q,"decision":"Approved"}}]`, approver))
		Expect(err).NotTo(HaveOccurred())
		git = observedIntent(ctx, git)
		succeeded(git)
		summary := git.Status.Observation.Summary

		By("HOME is not under the workspace, and git read no configuration of the agent's")
		home := ""
		for line := range strings.Lines(summary) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "HOME="); ok {
				home = v
			}
		}
		Expect(home).NotTo(BeEmpty(), "the call printed no HOME: %s", summary)
		Expect(home).NotTo(Or(Equal("/workspace"), HavePrefix("/workspace/")), "HOME is in the workspace: %s", summary)
		Expect(summary).NotTo(ContainSubstring(planted), "git read the agent's .gitconfig")
		// git config --get exits 1 when the key is set nowhere.
		Expect(summary).To(ContainSubstring("git-exit=1"), summary)
	})
}
