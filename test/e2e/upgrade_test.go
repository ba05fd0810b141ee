//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// An upgrade with calls in flight (make test-e2e on kind): the earlier commit's
// toolgate is installed (hack/deploy-previous.sh) and the specs labelled
// upgrade-before leave a call waiting for approval, a call running in a session and
// a background job running; then this tree's toolgate is applied over it, and the
// spec labelled upgrade-after checks that each call is decided, run and observed
// once, and that the archive holds a record of every one. The two run in separate
// `go test` runs, around the upgrade; the namespace carries what is in flight.
const upgradeNamespace = "e2e-upgrade"

// The calls in flight: each command appends one line to a file of its own and
// prints how many lines the file has, so a call that ran twice says 2.
const (
	upgradeApprover  = "alice"
	waitingTask      = "waits"
	sessionTask      = "session"
	jobTask          = "jobs"
	waitingCommand   = "git --version > /dev/null; echo ran >> approved.txt; wc -l < approved.txt"
	runningCommand   = "sleep 150; echo ran >> session.txt; wc -l < session.txt"
	backgroundScript = "sleep 160; echo ran >> job.txt"
)

func upgradeIntent(ctx SpecContext, task string, turn int32, tool toolgatev1alpha1.ToolName, input map[string]any) *toolgatev1alpha1.ToolIntent {
	GinkgoHelper()
	raw, err := json.Marshal(input)
	Expect(err).NotTo(HaveOccurred())
	intent := &toolgatev1alpha1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Name: intentName(task, turn), Namespace: upgradeNamespace},
		Spec: toolgatev1alpha1.ToolIntentSpec{
			TaskRef: toolgatev1alpha1.LocalObjectReference{Name: task}, Turn: turn,
			Tool: tool, Input: runtime.RawExtension{Raw: raw}, RequestedBy: whoAmI(ctx),
		},
	}
	Expect(k8s.Create(ctx, intent)).To(Succeed())
	return intent
}

var _ = Describe("Calls in flight across an upgrade, before it", Label("upgrade-before"), func() {
	It("leaves a call waiting for approval, a call running in a session and a background job running", func(ctx SpecContext) {
		me := whoAmI(ctx)
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: upgradeNamespace, Labels: map[string]string{"toolgate.dev/e2e": "true"}}})).To(Succeed())
		bindClusterRole(ctx, upgradeNamespace, "alice-approves", "toolgate-approver", userSubject(upgradeApprover))
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "upgrade", Namespace: upgradeNamespace},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{
				{
					Name: "git-needs-a-person", Action: toolgatev1alpha1.RuleAsk,
					Match:     toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("git")}},
					Reason:    "A person looks at every git command.",
					Approvers: toolgatev1alpha1.Approvers{Users: []string{upgradeApprover}},
				},
				{
					Name: "shell", Action: toolgatev1alpha1.RuleAllow,
					Match:  toolgatev1alpha1.RuleMatch{Tools: []toolgatev1alpha1.ToolName{toolgatev1alpha1.ToolBash, toolgatev1alpha1.ToolJobOutput}},
					Reason: "The spec's commands are its own.",
				},
			}},
		})).To(Succeed())
		for _, t := range []struct {
			name      string
			isolation toolgatev1alpha1.SandboxIsolation
		}{{waitingTask, toolgatev1alpha1.IsolationPerCall}, {sessionTask, toolgatev1alpha1.IsolationSession}, {jobTask, toolgatev1alpha1.IsolationSession}} {
			Expect(k8s.Create(ctx, &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: t.name, Namespace: upgradeNamespace},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			})).To(Succeed())
			Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
				ObjectMeta: metav1.ObjectMeta{Name: t.name, Namespace: upgradeNamespace},
				Spec: toolgatev1alpha1.AgentTaskSpec{
					Goal: "Work across an upgrade.", Mode: toolgatev1alpha1.ModeEdit,
					Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: t.name},
					Sandbox:   toolgatev1alpha1.SandboxSpec{Isolation: t.isolation},
					Agent:     toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}}}},
				},
			})).To(Succeed())
		}

		By("a call waits for alice's approval")
		waiting := upgradeIntent(ctx, waitingTask, 1, toolgatev1alpha1.ToolBash, map[string]any{"command": waitingCommand})
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)).To(Succeed())
			g.Expect(waiting.Status.ApprovalName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

		By("a background job runs in a pod of its own")
		job := observedIntent(ctx, upgradeIntent(ctx, jobTask, 1, toolgatev1alpha1.ToolBash, map[string]any{"command": backgroundScript, "runInBackground": true}))
		Expect(job.Status.Observation.Summary).To(ContainSubstring("[background job started: "+job.Name+"]"), job.Status.Observation.Summary)

		By("a call runs in the session")
		running := upgradeIntent(ctx, sessionTask, 1, toolgatev1alpha1.ToolBash, map[string]any{"command": runningCommand})
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(running), running)).To(Succeed())
			g.Expect(running.Status.ExecutionName).NotTo(BeEmpty())
			exec := &toolgatev1alpha1.Execution{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: upgradeNamespace, Name: running.Status.ExecutionName}, exec)).To(Succeed())
			g.Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionRunning))
			g.Expect(exec.Status.SessionName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		Expect(running.Status.Observation).To(BeNil(), "the session call ended before the upgrade")
	})
})

var _ = Describe("Calls in flight across an upgrade, after it", Label("upgrade-after"), func() {
	It("decides the waiting call by its approval, observes the running call once, runs nothing twice, and archives every call", func(ctx SpecContext) {
		// The upgrade-before spec left the namespace; a run that did not is no upgrade.
		Expect(k8s.Get(ctx, client.ObjectKey{Name: upgradeNamespace}, &corev1.Namespace{})).To(Succeed(), "the upgrade-before spec did not run")
		DeferCleanup(func(ctx SpecContext) {
			if CurrentSpecReport().Failed() {
				dumpNamespace(ctx, upgradeNamespace)
				return
			}
			Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: upgradeNamespace}})).To(Succeed())
		}, NodeTimeout(time.Minute))
		lines := func(intent *toolgatev1alpha1.ToolIntent) string {
			GinkgoHelper()
			Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), "%s: %s", intent.Name, intent.Status.Observation.Summary)
			summary := strings.TrimSpace(intent.Status.Observation.Summary)
			return summary[strings.LastIndex(summary, "\n")+1:]
		}

		By("the call asked before the upgrade is approved after it, and runs once")
		waiting := &toolgatev1alpha1.ToolIntent{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: upgradeNamespace, Name: intentName(waitingTask, 1)}, waiting)).To(Succeed())
		Expect(waiting.Status.Observation).To(BeNil(), "the waiting call ended without its approval")
		_, err := kubectl(ctx, "--as", upgradeApprover, "-n", upgradeNamespace, "patch", "approval", waiting.Status.ApprovalName, "--type", "json",
			"-p", fmt.Sprintf(`[{"op":"add","path":"/spec/votes/-","value":{"user":%q,"decision":"Approved"}}]`, upgradeApprover))
		Expect(err).NotTo(HaveOccurred())
		Expect(lines(observedIntent(ctx, waiting))).To(Equal("1"), "the approved call ran more than once")

		By("the call running in the session through the upgrade is observed once, and never run again")
		// Its result streams to the controller that delivered it: the controller that
		// replaced it does not have it, so the call is stopped with its stream and
		// observed as an exception that says so (docs/install.md, "Upgrading"). It
		// may also have finished before the old controller went away.
		running := observedIntent(ctx, &toolgatev1alpha1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Namespace: upgradeNamespace, Name: intentName(sessionTask, 1)}})
		ranLines := "0"
		if running.Status.Observation.Outcome == toolgatev1alpha1.OutcomeSucceeded {
			ranLines = "1"
			Expect(lines(running)).To(Equal("1"), "the session call ran more than once")
		} else {
			Expect(running.Status.Observation.Summary).To(ContainSubstring("by a controller that is gone"), running.Status.Observation.Summary)
			Expect(running.Status.Observation.Summary).To(ContainSubstring("it is not run again"))
		}
		after := observedIntent(ctx, upgradeIntent(ctx, sessionTask, 2, toolgatev1alpha1.ToolBash, map[string]any{"command": "touch session.txt; wc -l < session.txt"}))
		Expect(lines(after)).To(Equal(ranLines), "the session call ran again, or ran on after it was observed")
		Eventually(func(g Gomega) {
			var events corev1.EventList
			g.Expect(k8s.List(ctx, &events, client.InNamespace(upgradeNamespace))).To(Succeed())
			observed := 0
			for _, e := range events.Items {
				if e.InvolvedObject.Name == running.Name && e.Reason == "Observed" {
					observed += int(max(e.Count, 1))
				}
			}
			g.Expect(observed).To(Equal(1), "Observed events of %s", running.Name)
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		By("the background job started before the upgrade ends once, and never runs again")
		job := &toolgatev1alpha1.Execution{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: upgradeNamespace, Name: intentName(jobTask, 1)}, job)).To(Succeed())
			g.Expect(job.Status.Phase).To(Or(Equal(toolgatev1alpha1.ExecutionSucceeded), Equal(toolgatev1alpha1.ExecutionFailed)))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		// A job streams to the controller that started it, as a session call does.
		jobLines := "1"
		if job.Status.Phase != toolgatev1alpha1.ExecutionSucceeded {
			jobLines = "0"
			Expect(job.Status.Message).To(ContainSubstring("by a controller that is gone"), job.Status.Message)
		}
		count := observedIntent(ctx, upgradeIntent(ctx, jobTask, 2, toolgatev1alpha1.ToolBash, map[string]any{"command": "touch job.txt; wc -l < job.txt"}))
		Expect(lines(count)).To(Equal(jobLines), "the background job ran again, or ran on after it ended")

		By("the archive holds a record of every call, those of the earlier version too")
		names := []string{intentName(waitingTask, 1), intentName(sessionTask, 1), intentName(sessionTask, 2), intentName(jobTask, 1), intentName(jobTask, 2)}
		Eventually(func(g Gomega) {
			g.Expect(archiveQuery(ctx, "SELECT count(DISTINCT name) FROM records WHERE kind = 'Call' AND namespace = '%s'", upgradeNamespace)).To(Equal(fmt.Sprint(len(names))))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	})
})
