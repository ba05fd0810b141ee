//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/testenv"
)

// The seeds' story, through the whole pipeline: an external agent (the spec) proposes
// ToolIntents; policy decides; a person approves with kubectl; Jobs run the tools.
var _ = Describe("The pipeline on a real cluster", func() {
	const (
		task     = "fix-the-test"
		approver = "alice"
	)
	var ns, me string

	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		claim := newWorkspace(ctx, ns)
		me = whoAmI(ctx)
		seedWorkspace(ctx, ns, claim, map[string]string{
			"calc.sh": "echo $(($1 - $2))\n",
			"test.sh": "got=$(sh calc.sh 2 3)\nif [ \"$got\" = 5 ]; then echo \"PASS: 2 + 3 = 5\"; else echo \"FAIL: 2 + 3 gave $got\"; exit 1; fi\n",
		})
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "alice-approves", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-approver"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: approver}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "story", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{
				{
					Name: "no-recursive-delete", Action: toolgatev1alpha1.RuleDeny,
					Match:  toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("rm", "-rf"), pattern("rm", "-fr"), pattern("rm", "-r")}},
					Reason: "Recursive deletes are never run by an agent.",
				},
				{
					Name: "run-tests", Action: toolgatev1alpha1.RuleAllow,
					Match:  toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("sh", "test.sh")}},
					Reason: "The test script only reads the workspace.",
				},
				{
					Name: "edits-need-a-reviewer", Action: toolgatev1alpha1.RuleAsk,
					Match:     toolgatev1alpha1.RuleMatch{Tools: []toolgatev1alpha1.ToolName{toolgatev1alpha1.ToolEditFile, toolgatev1alpha1.ToolWriteFile}},
					Reason:    "A person reviews every change to the workspace.",
					Approvers: toolgatev1alpha1.Approvers{Users: []string{approver}},
				},
			}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: task, Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal:      "Make test.sh pass by fixing calc.sh.",
				Mode:      toolgatev1alpha1.ModeEdit,
				Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
				Agent:     toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}}}},
			},
		})).To(Succeed())
	})

	It("runs a failing test, reads, edits after an approval, passes; a denied rm -rf never creates a Job", func(ctx SpecContext) {
		propose := func(turn int32, tool toolgatev1alpha1.ToolName, input map[string]any) *toolgatev1alpha1.ToolIntent {
			GinkgoHelper()
			raw, err := json.Marshal(input)
			Expect(err).NotTo(HaveOccurred())
			intent := &toolgatev1alpha1.ToolIntent{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-t%d-0", task, turn), Namespace: ns},
				Spec: toolgatev1alpha1.ToolIntentSpec{
					TaskRef: toolgatev1alpha1.LocalObjectReference{Name: task},
					Turn:    turn, Index: 0, Tool: tool,
					Input:       runtime.RawExtension{Raw: raw},
					RequestedBy: me,
				},
			}
			Expect(k8s.Create(ctx, intent)).To(Succeed())
			return intent
		}

		By("running the failing test: allowed by policy, exit code 1 observed")
		run1 := observedIntent(ctx, propose(1, toolgatev1alpha1.ToolBash, map[string]any{"command": "sh test.sh"}))
		Expect(run1.Status.Decision.Action).To(Equal(toolgatev1alpha1.DecisionAllow))
		Expect(run1.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeFailed))
		Expect(run1.Status.Observation.ExitCode).To(Equal(ptr.To[int32](1)))
		Expect(run1.Status.Observation.Summary).To(ContainSubstring("FAIL: 2 + 3 gave -1"))
		Expect(run1.Status.Observation.Summary).To(ContainSubstring("[exit code: 1]"))

		By("reading the script")
		read := observedIntent(ctx, propose(2, toolgatev1alpha1.ToolReadFile, map[string]any{"path": "calc.sh"}))
		Expect(read.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(read.Status.Observation.Summary).To(ContainSubstring("$1 - $2"))

		By("editing it: policy asks, nothing runs until alice approves with kubectl patch")
		edit := propose(3, toolgatev1alpha1.ToolEditFile, map[string]any{"path": "calc.sh", "oldText": "$1 - $2", "newText": "$1 + $2"})
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(edit), edit)).To(Succeed())
			g.Expect(edit.Status.ApprovalName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		Expect(edit.Status.Decision.Action).To(Equal(toolgatev1alpha1.DecisionAsk))
		Expect(edit.Status.ExecutionName).To(BeEmpty(), "the edit ran before anyone approved it")
		// The controller wrote the Ask where it would have started the call: no Job
		// can come after it without an approval.
		testenv.Absent(GinkgoT(), time.Minute, "the edit's Ask recorded, naming its Approval", func() (bool, string) {
			return edit.Status.ApprovalName != "" && edit.Status.Decision.Action == toolgatev1alpha1.DecisionAsk, edit.Status.ApprovalName
		}, "a Job for an intent waiting for approval", func() bool { return len(jobsOf(ctx, ns, edit.Name)) > 0 })

		_, err := kubectl(ctx, "--as", approver, "-n", ns, "patch", "approval", edit.Status.ApprovalName, "--type", "json",
			"-p", fmt.Sprintf(`[{"op":"add","path":"/spec/votes/-","value":{"user":%q,"decision":"Approved"}}]`, approver))
		Expect(err).NotTo(HaveOccurred())
		edit = observedIntent(ctx, edit)
		Expect(edit.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), edit.Status.Observation.Summary)
		var approval toolgatev1alpha1.Approval
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: edit.Status.ApprovalName}, &approval)).To(Succeed())
		Expect(approval.Status.State).To(Equal(toolgatev1alpha1.ApprovalStateConsumed))
		Expect(approval.Status.ConsumedByExecutionName).To(Equal(edit.Status.ExecutionName))

		By("running the test again: exit code 0")
		run2 := observedIntent(ctx, propose(4, toolgatev1alpha1.ToolBash, map[string]any{"command": "sh test.sh"}))
		Expect(run2.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(run2.Status.Observation.ExitCode).To(Equal(ptr.To[int32](0)))
		Expect(run2.Status.Observation.Summary).To(ContainSubstring("PASS: 2 + 3 = 5"))

		By("a recursive delete: denied, observed as not executed, and no Job")
		rm := observedIntent(ctx, propose(5, toolgatev1alpha1.ToolBash, map[string]any{"command": "rm -rf /workspace"}))
		Expect(rm.Status.Decision.Action).To(Equal(toolgatev1alpha1.DecisionDeny))
		Expect(rm.Status.Decision.PolicyRuleRef.Rule).To(Equal("no-recursive-delete"))
		Expect(rm.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeDenied))
		Expect(rm.Status.Observation.Executed).To(BeFalse())
		Expect(rm.Status.ExecutionName).To(BeEmpty())
		Expect(jobsOf(ctx, ns, rm.Name)).To(BeEmpty())

		// One Job per executed intent (run, read, edit, run), each recorded by its
		// Execution; a spent one may be deleted already (--spent-job-ttl).
		var execs toolgatev1alpha1.ExecutionList
		Expect(k8s.List(ctx, &execs, client.InNamespace(ns))).To(Succeed())
		finished := map[string]time.Time{} // by Job name
		for _, e := range execs.Items {
			Expect(e.Status.JobName).NotTo(BeEmpty(), "Execution %s recorded no Job", e.Name)
			finished[e.Status.JobName] = executor.FinishedAt(&e.Status)
		}
		Expect(finished).To(HaveLen(4), "one Job per executed intent: run, read, edit, run")
		var jobs batchv1.JobList
		Expect(k8s.List(ctx, &jobs, client.InNamespace(ns))).To(Succeed())
		for _, j := range jobs.Items {
			Expect(finished).To(HaveKey(j.Name), "Job %s is no executed intent's", j.Name)
			// A Job made after its call finished would be a second run.
			Expect(j.CreationTimestamp.Time).NotTo(BeTemporally(">", finished[j.Name]), "Job %s was made after its call finished", j.Name)
		}
	})
})

// observedIntent waits for intent's Observed condition and returns it.
func observedIntent(ctx context.Context, intent *toolgatev1alpha1.ToolIntent) *toolgatev1alpha1.ToolIntent {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(intent.Status.Conditions, toolgatev1alpha1.ConditionObserved)).To(BeTrue(),
			"ToolIntent %s is not Observed: %v", intent.Name, intent.Status.Conditions)
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	Expect(intent.Status.Observation).NotTo(BeNil())
	return intent
}

func jobsOf(ctx context.Context, ns, intent string) []batchv1.Job {
	GinkgoHelper()
	var jobs batchv1.JobList
	Expect(k8s.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{"toolgate.dev/intent": intent})).To(Succeed())
	return jobs.Items
}

// pattern is the CommandPattern of an argv prefix.
func pattern(words ...string) toolgatev1alpha1.CommandPattern {
	return toolgatev1alpha1.CommandPattern{Prefix: words}
}

// whoAmI is the suite's user name as the API server sees it: an intent's requestedBy
// must be its creator.
func whoAmI(ctx context.Context) string {
	GinkgoHelper()
	review := &authenticationv1.SelfSubjectReview{}
	Expect(k8s.Create(ctx, review)).To(Succeed())
	Expect(review.Status.UserInfo.Username).NotTo(BeEmpty())
	return review.Status.UserInfo.Username
}

// seedWorkspace writes files into the claim with a pod running as the sandbox's user.
// File contents travel as environment variables, never through a shell's parser.
func seedWorkspace(ctx context.Context, ns, claim string, files map[string]string) {
	GinkgoHelper()
	script := "set -e\n"
	var env []corev1.EnvVar
	i := 0
	for name, content := range files {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("F%d_NAME", i), Value: name}, corev1.EnvVar{Name: fmt.Sprintf("F%d_DATA", i), Value: content})
		script += fmt.Sprintf("printf '%%s' \"$F%d_DATA\" > \"$F%d_NAME\"\n", i, i)
		i++
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "seed-workspace", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "seed", Image: workspaceImage, Command: []string{"sh", "-c", script}, Env: env, WorkingDir: "/workspace",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}},
			}},
			Volumes: []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "the seed pod is %s", pod.Status.Phase)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
}
