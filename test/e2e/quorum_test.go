//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
)

var _ = Describe("A quorum of two", func() {
	It("runs the call only after the second person's vote, each vote cast as its voter", func(ctx SpecContext) {
		const alice, bob = "alice", "bob"
		ns := newNamespace(ctx)
		me := whoAmI(ctx)
		claim := newWorkspace(ctx, ns)
		bindClusterRole(ctx, ns, "approvers", "toolgate-approver", userSubject(alice), userSubject(bob))
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "four-eyes", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{{
				Name: "writes-need-two", Action: toolgatev1alpha1.RuleAsk,
				Match:     toolgatev1alpha1.RuleMatch{Tools: []toolgatev1alpha1.ToolName{toolgatev1alpha1.ToolWriteFile}},
				Reason:    "Two people review every write.",
				Approvers: toolgatev1alpha1.Approvers{Users: []string{alice, bob}, Required: 2},
			}}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: "write", Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal: "Write the release notes.", Mode: toolgatev1alpha1.ModeEdit,
				Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
				Agent: toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{
					Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}},
				}},
			},
		})).To(Succeed())
		raw, err := json.Marshal(map[string]string{"path": "NOTES.md", "content": "two people read this\n"})
		Expect(err).NotTo(HaveOccurred())
		intent := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: "write-t0-0", Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{
				TaskRef: toolgatev1alpha1.LocalObjectReference{Name: "write"}, Tool: toolgatev1alpha1.ToolWriteFile,
				Input: runtime.RawExtension{Raw: raw}, RequestedBy: me,
			},
		}
		Expect(k8s.Create(ctx, intent)).To(Succeed())
		approval := &toolgatev1alpha1.Approval{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())
			g.Expect(intent.Status.ApprovalName).NotTo(BeEmpty(), "the write asks for no approval: %v", intent.Status.Conditions)
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: intent.Status.ApprovalName}, approval)).To(Succeed())
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(approval.Spec.Approvers.Required).To(Equal(int32(2)))

		vote := func(user string) {
			GinkgoHelper()
			_, err := kubectl(ctx, "--as", user, "-n", ns, "patch", "approval", approval.Name, "--type", "json",
				"-p", fmt.Sprintf(`[{"op":"add","path":"/spec/votes/-","value":{"user":%q,"decision":"Approved"}}]`, user))
			Expect(err).NotTo(HaveOccurred())
		}

		By("alice's vote: 1/2, and nothing runs")
		vote(alice)
		testenv.Absent(GinkgoT(), 30*time.Second, "the controller counted alice's vote", func() (bool, string) {
			got := &toolgatev1alpha1.Approval{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(approval), got); err != nil {
				return false, err.Error()
			}
			return got.Status.Tally == "1/2" && got.Status.State == toolgatev1alpha1.ApprovalStatePending, got.Status.Tally + " " + string(got.Status.State)
		}, "an Execution or a Job for a call one vote short of its quorum", func() bool {
			got := &toolgatev1alpha1.ToolIntent{}
			return k8s.Get(ctx, client.ObjectKeyFromObject(intent), got) == nil && got.Status.ExecutionName != "" || len(jobsOf(ctx, ns, intent.Name)) > 0
		})

		By("alice cannot vote twice; bob's vote is the second: the call runs")
		_, err = kubectl(ctx, "--as", alice, "-n", ns, "patch", "approval", approval.Name, "--type", "json",
			"-p", fmt.Sprintf(`[{"op":"add","path":"/spec/votes/-","value":{"user":%q,"decision":"Approved"}}]`, alice))
		Expect(err).To(MatchError(ContainSubstring("spec.votes holds one vote per person")), "alice's second vote")
		vote(bob)
		done := observedIntent(ctx, intent)
		Expect(done.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), done.Status.Observation.Summary)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(approval), approval)).To(Succeed())
		Expect(approval.Status.ApprovedBy).To(Equal([]string{alice, bob}))
		Expect(approval.Status.Tally).To(Equal("2/2"))
		Expect(approval.Status.ConsumedByExecutionName).To(Equal(done.Status.ExecutionName))
	})
})
