//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
)

// The sandbox enforces the verdict: a call allowed because it is read-only runs with
// the workspace mounted read-only and no network, even in a task whose calls may
// reach the whole internet, so a command the classifier misjudged fails instead of
// writing.
var _ = Describe("The sandbox of a call allowed as read-only", func() {
	for _, isolation := range []toolgatev1alpha1.SandboxIsolation{toolgatev1alpha1.IsolationPerCall, toolgatev1alpha1.IsolationSession} {
		Context("with isolation "+string(isolation), func() { readOnlyWallSpecs(isolation) })
	}
})

func readOnlyWallSpecs(isolation toolgatev1alpha1.SandboxIsolation) {
	const (
		task  = "walls"
		notes = "original notes\n"
	)
	var ns, claim, me string

	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		claim = newWorkspace(ctx, ns)
		me = whoAmI(ctx)
		seedWorkspace(ctx, ns, claim, map[string]string{
			"notes.txt": notes,
			"append.sh": "echo appended >> other.txt\n",
		})
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "scripts", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{{
				Name: "run-append", Action: toolgatev1alpha1.RuleAllow,
				Match:  toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("sh", "append.sh")}},
				Reason: "The append script is reviewed.",
			}}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: task, Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal:      "Read the notes.",
				Mode:      toolgatev1alpha1.ModeEdit,
				Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
				Sandbox: toolgatev1alpha1.SandboxSpec{Isolation: isolation, Network: toolgatev1alpha1.NetworkSpec{
					Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "0.0.0.0/0"}},
				}},
				Agent: toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}}}},
			},
		})).To(Succeed())
	})

	propose := func(ctx SpecContext, turn int32, command string) *toolgatev1alpha1.ToolIntent {
		GinkgoHelper()
		raw, err := json.Marshal(map[string]string{"command": command})
		Expect(err).NotTo(HaveOccurred())
		intent := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: intentName(task, turn), Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{
				TaskRef: toolgatev1alpha1.LocalObjectReference{Name: task},
				Turn:    turn, Tool: toolgatev1alpha1.ToolBash,
				Input:       runtime.RawExtension{Raw: raw},
				RequestedBy: me,
			},
		}
		Expect(k8s.Create(ctx, intent)).To(Succeed())
		return observedIntent(ctx, intent)
	}

	It("mounts the workspace read-only and denies all egress, whatever the task's egress; other calls keep the task's sandbox", func(ctx SpecContext) {
		read := propose(ctx, 0, "cat notes.txt; if test -w /workspace; then echo workspace-writable; else echo workspace-read-only; fi")
		d := read.Status.Decision
		Expect(d.Action).To(Equal(toolgatev1alpha1.DecisionAllow))
		Expect(d.Category).To(Equal(toolgatev1alpha1.CategoryReadOnly))
		Expect(d.Walls).To(Equal(&toolgatev1alpha1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, Reason: "every part of the call is read-only"}))
		Expect(read.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), read.Status.Observation.Summary)
		Expect(read.Status.Observation.Summary).To(ContainSubstring(notes))
		Expect(read.Status.Observation.Summary).To(ContainSubstring("workspace-read-only"))

		exec := executionOf(ctx, read)
		Expect(exec.Status.SessionName != "").To(Equal(isolation == toolgatev1alpha1.IsolationSession), "ran in session %q", exec.Status.SessionName)
		Expect(exec.Spec.Walls).To(Equal(d.Walls))
		Expect(exec.Spec.Sandbox.ReadOnlyWorkspace).To(BeTrue())
		Expect(exec.Spec.Sandbox.Network).To(Equal(toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkNone}))
		Expect(workspaceMountReadOnly(ctx, exec)).To(BeTrue())
		Expect(egressRules(ctx, exec)).To(BeEmpty(), "the NetworkPolicy of a read-only call allows egress")

		By("a call a rule allows for another reason: the task's writable workspace and egress")
		appended := propose(ctx, 1, "sh append.sh")
		Expect(appended.Status.Decision.PolicyRuleRef.Rule).To(Equal("run-append"))
		Expect(appended.Status.Decision.Walls).To(BeNil())
		Expect(appended.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), appended.Status.Observation.Summary)
		exec = executionOf(ctx, appended)
		Expect(exec.Spec.Walls).To(BeNil())
		Expect(exec.Spec.Sandbox.Network.Mode).To(Equal(toolgatev1alpha1.NetworkAllowList))
		Expect(workspaceMountReadOnly(ctx, exec)).To(BeFalse())
		Expect(egressRules(ctx, exec)).To(HaveLen(1))
	})

	if isolation == toolgatev1alpha1.IsolationSession {
		// The next spec plays the misjudging classifier with an Execution of no task,
		// and a session belongs to a task: the read-only session's mount is checked by
		// the spec above.
		return
	}
	It("stops a command misjudged as read-only: the write fails with Read-only file system and the file is unchanged", func(ctx SpecContext) {
		// No command the classifier calls read-only writes in this image: the hole
		// the walls exist for (a read-only git command made to run a program by a
		// repository config the agent planted earlier) needs git, which the busybox
		// workspace image has not. So the spec plays the misjudging classifier: the
		// Execution is built by pipeline.BuildExecution, as the controller builds it,
		// from the decision policy.Decide makes for a read-only command, while the
		// command it runs appends to the notes.
		var taskObj toolgatev1alpha1.AgentTask
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: task}, &taskObj)).To(Succeed())
		decision := policy.Decide(policy.Request{
			Namespace: ns, Task: task, Mode: taskObj.Spec.Mode, Tool: toolgatev1alpha1.ToolBash,
			Input: json.RawMessage(`{"command":"cat notes.txt"}`),
		}, nil, nil, nil)
		Expect(decision.Action).To(Equal(toolgatev1alpha1.DecisionAllow))
		Expect(decision.Walls).NotTo(BeNil())

		// The intent names no existing task, so that the ToolIntent controller leaves
		// its call to this spec (runAsController).
		intent := &toolgatev1alpha1.ToolIntent{
			ObjectMeta: metav1.ObjectMeta{Name: "misjudged", Namespace: ns},
			Spec: toolgatev1alpha1.ToolIntentSpec{
				TaskRef: toolgatev1alpha1.LocalObjectReference{Name: noTask}, Tool: toolgatev1alpha1.ToolBash,
				Input:       runtime.RawExtension{Raw: []byte(`{"command":"echo pwned >> notes.txt"}`)},
				RequestedBy: me,
			},
			Status: toolgatev1alpha1.ToolIntentStatus{
				Validation: &toolgatev1alpha1.Validation{TimeoutSeconds: 60},
				Decision:   &decision,
			},
		}
		sandbox, err := pipeline.DecideSandbox(&taskObj, intent.Status.Validation, decision.Walls, workspaceImage)
		Expect(err).NotTo(HaveOccurred())
		intent.Status.Decision.Sandbox = sandbox
		exec, err := pipeline.BuildExecution(intent)
		Expect(err).NotTo(HaveOccurred())
		Expect(exec.Spec.Sandbox.Network.Mode).To(Equal(toolgatev1alpha1.NetworkNone))
		runAsController(ctx, exec)
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(exec), exec)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(exec.Status.Conditions, toolgatev1alpha1.ConditionComplete)).To(BeTrue(),
				"Execution %s is not Complete: phase %q", exec.Name, exec.Status.Phase)
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))
		Expect(exitCode(exec)).NotTo(BeZero())
		Expect(exec.Status.Output).To(ContainSubstring("Read-only file system"))

		check := run(ctx, ns, claim, bash("check-notes", "cat notes.txt"))
		Expect(exitCode(check)).To(BeZero())
		Expect(check.Status.Output).To(Equal(notes), "the misjudged command changed notes.txt")
	})
}

// intentName is the deterministic name of the intent of that turn, as an agent names it.
func intentName(task string, turn int32) string {
	return fmt.Sprintf("%s-t%d-0", task, turn)
}

// executionOf is the intent's Execution.
func executionOf(ctx SpecContext, intent *toolgatev1alpha1.ToolIntent) *toolgatev1alpha1.Execution {
	GinkgoHelper()
	Expect(intent.Status.ExecutionName).NotTo(BeEmpty(), "intent %s has no Execution", intent.Name)
	exec := &toolgatev1alpha1.Execution{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: intent.Namespace, Name: intent.Status.ExecutionName}, exec)).To(Succeed())
	return exec
}

// callPod is the spec and labels of the pod the Execution ran in: its Job's pod, or
// the session pod it was delivered to.
func callPod(ctx SpecContext, exec *toolgatev1alpha1.Execution) (corev1.PodSpec, map[string]string) {
	GinkgoHelper()
	if exec.Status.SessionName != "" {
		var pod corev1.Pod
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: exec.Status.SessionName}, &pod)).To(Succeed())
		return pod.Spec, pod.Labels
	}
	var job batchv1.Job
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: executor.JobName(exec)}, &job)).To(Succeed())
	return job.Spec.Template.Spec, job.Spec.Template.Labels
}

// workspaceMountReadOnly says whether the pod the Execution ran in mounts the
// workspace read-only, in the claim and in the tool's container.
func workspaceMountReadOnly(ctx SpecContext, exec *toolgatev1alpha1.Execution) bool {
	GinkgoHelper()
	spec, _ := callPod(ctx, exec)
	readOnly := true
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			readOnly = readOnly && v.PersistentVolumeClaim.ReadOnly
		}
	}
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/workspace" {
				readOnly = readOnly && m.ReadOnly
			}
		}
	}
	return readOnly
}

// egressRules are the egress rules of the NetworkPolicy that fences the pod the
// Execution ran in (its task's, for its walls), which governs egress: none means
// every destination is denied.
func egressRules(ctx SpecContext, exec *toolgatev1alpha1.Execution) []networkingv1.NetworkPolicyEgressRule {
	GinkgoHelper()
	var np networkingv1.NetworkPolicy
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: executor.NetworkPolicyName(exec)}, &np)).To(Succeed())
	Expect(np.Spec.PolicyTypes).To(ContainElement(networkingv1.PolicyTypeEgress))
	_, labels := callPod(ctx, exec)
	Expect(np.Spec.PodSelector.MatchLabels).To(HaveKeyWithValue(toolgatev1alpha1.LabelNetwork, labels[toolgatev1alpha1.LabelNetwork]), "the NetworkPolicy does not select the call's pod")
	return np.Spec.Egress
}
