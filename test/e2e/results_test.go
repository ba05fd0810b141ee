//go:build e2e

package e2e

import (
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// A Result rule that keys on the call (here its command) withholds the output from
// the model; the runner must not leave a copy of that output in the workspace, where
// the next call, which no rule keys on, would read it.
var _ = Describe("An output a Result rule withholds", func() {
	const (
		task   = "results"
		marker = "release-plan-7431"
	)
	var ns, claim, me string

	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		claim = newWorkspace(ctx, ns)
		me = whoAmI(ctx)
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "results", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{{
				Name: "plans-stay-out", When: toolgatev1alpha1.WhenResult, Action: toolgatev1alpha1.RuleReplace,
				Reason:      "Release plans are not for the model.",
				Instruction: "The output of your last call was withheld by policy. Go on with the task.",
				Match:       toolgatev1alpha1.RuleMatch{CEL: `intent.tool == 'bash' && intent.input.command.contains('release-plan')`},
			}}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: task, Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal:      "Write a release plan.",
				Mode:      toolgatev1alpha1.ModeAuto,
				Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
				Agent:     toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}}}},
			},
		})).To(Succeed())
	})

	propose := func(ctx SpecContext, turn int32, command string) *toolgatev1alpha1.ToolIntent {
		GinkgoHelper()
		raw, err := json.Marshal(map[string]any{"command": command})
		Expect(err).NotTo(HaveOccurred())
		intent := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: intentName(task, turn), Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{
				TaskRef: toolgatev1alpha1.LocalObjectReference{Name: task},
				Turn:    turn, Tool: toolgatev1alpha1.ToolBash, Input: runtime.RawExtension{Raw: raw}, RequestedBy: me,
			},
		}
		Expect(k8s.Create(ctx, intent)).To(Succeed())
		return observedIntent(ctx, intent)
	}
	execution := func(ctx SpecContext, intent *toolgatev1alpha1.ToolIntent) *toolgatev1alpha1.Execution {
		GinkgoHelper()
		exec := &toolgatev1alpha1.Execution{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: intent.Status.ExecutionName}, exec)).To(Succeed())
		return exec
	}

	It("leaves no copy of it in the workspace for a later call to read", func(ctx SpecContext) {
		By("a writing call the rule keys on: its output is replaced, and not copied")
		withheld := propose(ctx, 1, "touch release-plan.done; echo "+marker)
		Expect(withheld.Status.Observation.Summary).To(ContainSubstring("[output withheld]"))
		Expect(withheld.Status.Observation.Summary).NotTo(ContainSubstring(marker))
		exec := execution(ctx, withheld)
		Expect(exec.Spec.Walls).NotTo(BeNil())
		Expect(exec.Spec.Walls.NoOutputCopy).To(BeTrue(), "walls %+v", exec.Spec.Walls)
		Expect(exec.Status.ArtifactPath).To(BeEmpty())
		Expect(exec.Status.Output).To(ContainSubstring(marker), "the Execution keeps what the call printed")

		By("a later call the rule does not key on finds no copy of that output")
		// It lists the copies rather than reading them: a call that reads its own
		// copy while writing it would feed itself.
		later := propose(ctx, 2, "mkdir -p scratch; ls -aR .toolgate 2>&1; true")
		Expect(later.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), later.Status.Observation.Summary)
		Expect(later.Status.Observation.Summary).NotTo(ContainSubstring(intentName(task, 1)), "the withheld call's folder exists")

		By("a call no rule could act on keeps its copy, as before")
		Expect(execution(ctx, later).Status.ArtifactPath).NotTo(BeEmpty())
	})
})
