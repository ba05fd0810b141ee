//go:build e2e

package e2e

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
)

// Sessions (isolation Session) on the real cluster: the task's warm pods, calls
// delivered through the API server's pods/exec, and the walls that must hold there as
// they do in a Job.
var _ = Describe("A task's sessions", func() {
	const task = "session"
	var ns, me, claim string

	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		claim = newWorkspace(ctx, ns)
		me = whoAmI(ctx)
		seedWorkspace(ctx, ns, claim, map[string]string{"notes.txt": "session notes\n"})
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "session", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{{
				Name: "shell", Action: toolgatev1alpha1.RuleAllow,
				Match:  toolgatev1alpha1.RuleMatch{Tools: []toolgatev1alpha1.ToolName{toolgatev1alpha1.ToolBash, toolgatev1alpha1.ToolJobOutput, toolgatev1alpha1.ToolJobKill}},
				Reason: "The spec's commands are its own.",
			}}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
			ObjectMeta: metav1.ObjectMeta{Name: task, Namespace: ns},
			Spec: toolgatev1alpha1.AgentTaskSpec{
				Goal: "Work in a session.", Mode: toolgatev1alpha1.ModeEdit,
				Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
				Sandbox:   toolgatev1alpha1.SandboxSpec{Isolation: toolgatev1alpha1.IsolationSession},
				Agent:     toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "the e2e suite", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}}}},
				Budgets:   toolgatev1alpha1.Budgets{MaxTurns: 50, MaxIntents: 50},
			},
		})).To(Succeed())
	})

	turn := int32(0)
	// createTool proposes a call of the next turn and returns at once.
	createTool := func(ctx SpecContext, tool toolgatev1alpha1.ToolName, input map[string]any) *toolgatev1alpha1.ToolIntent {
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
		return intent
	}
	// create proposes a bash call of the next turn and returns at once.
	create := func(ctx SpecContext, input map[string]any) *toolgatev1alpha1.ToolIntent {
		GinkgoHelper()
		return createTool(ctx, toolgatev1alpha1.ToolBash, input)
	}
	// propose proposes a bash command and waits for its observation.
	propose := func(ctx SpecContext, command string) (*toolgatev1alpha1.ToolIntent, *toolgatev1alpha1.Execution) {
		GinkgoHelper()
		intent := observedIntent(ctx, create(ctx, map[string]any{"command": command}))
		return intent, executionOf(ctx, intent)
	}
	sessionPod := func(ctx SpecContext, exec *toolgatev1alpha1.Execution) *corev1.Pod {
		GinkgoHelper()
		Expect(exec.Status.SessionName).To(HavePrefix(executor.SessionPrefix), "the call ran as Job %q, not in a session", exec.Status.JobName)
		pod := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: exec.Status.SessionName}, pod)).To(Succeed())
		return pod
	}

	It("runs calls in warm pods with a Job's walls: no token, non-root, read-only root, a read-only workspace for read-only calls", func(ctx SpecContext) {
		By("the two warm sessions start with the task")
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{toolgatev1alpha1.LabelSession})).To(Succeed())
			running := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			g.Expect(running).To(Equal(2))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())

		intent, exec := propose(ctx, "id -u; if test -e /var/run/secrets/kubernetes.io/serviceaccount/token; then echo sa-mounted; else echo sa-absent; fi; "+
			"if touch /rootfs-probe 2>/dev/null; then echo root-writable; else echo root-read-only; fi; echo made > made.txt; cat made.txt")
		obs := intent.Status.Observation
		Expect(obs.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), obs.Summary)
		Expect(obs.Summary).To(ContainSubstring("65532\nsa-absent\nroot-read-only\nmade"))
		Expect(exec.Status.JobName).To(BeEmpty())
		Expect(exec.Status.Sandbox).To(Equal(&toolgatev1alpha1.ObservedSandbox{UID: 65532, ReadOnlyRootFilesystem: true}))
		rw := sessionPod(ctx, exec)
		Expect(*rw.Spec.AutomountServiceAccountToken).To(BeFalse())
		Expect(rw.Spec.Containers[0].SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
		Expect(workspaceMountReadOnly(ctx, exec)).To(BeFalse())

		By("a read-only call runs in the read-only session, which cannot write the workspace")
		intent, exec = propose(ctx, "cat notes.txt; if test -w /workspace; then echo workspace-writable; else echo workspace-read-only; fi")
		Expect(intent.Status.Decision.Walls).NotTo(BeNil())
		Expect(intent.Status.Observation.Summary).To(ContainSubstring("session notes\nworkspace-read-only"))
		ro := sessionPod(ctx, exec)
		Expect(ro.Name).NotTo(Equal(rw.Name))
		Expect(workspaceMountReadOnly(ctx, exec)).To(BeTrue())
		Expect(egressRules(ctx, exec)).To(BeEmpty())

		By("nobody but the controller execs into a session pod")
		out, err := kubectl(ctx, "-n", ns, "exec", rw.Name, "-c", "tool", "--", "/toolgate-runner/runner", "exec")
		Expect(err).To(HaveOccurred(), "kubectl exec into the session pod worked: %s", out)
		Expect(err.Error()).To(ContainSubstring("sessions.toolgate.dev"))
		Expect(err.Error()).To(ContainSubstring("may not exec into pod " + ns + "/" + rw.Name))
	})

	It("kills what a call left behind before the next call runs", func(ctx SpecContext) {
		intent, first := propose(ctx, "sleep 300 > /dev/null 2>&1 & echo $! > left.pid; (setsid sleep 301 > /dev/null 2>&1 &); echo started")
		Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), intent.Status.Observation.Summary)
		intent, second := propose(ctx, "if kill -0 $(cat left.pid) 2>/dev/null; then echo alive; else echo gone; fi > check.txt; ps -o pid,args | grep 'sleep 30[01]' > ps.txt; cat check.txt ps.txt")
		Expect(second.Status.SessionName).To(Equal(first.Status.SessionName), "both calls must run in the same session")
		Expect(intent.Status.Observation.Summary).To(ContainSubstring("gone"))
		Expect(intent.Status.Observation.Summary).NotTo(ContainSubstring("sleep 30"))
	})

	It("runs a background job in a pod of its own until job_kill, and stops the rest with the task", func(ctx SpecContext) {
		// The job beats a heartbeat file in the workspace (a counter, renamed into
		// place whole); a call sees the job alive when the beat moves within 5 s, and
		// gone when it stands still for 2 s.
		const beating = "a=$(cat beat); for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.5; b=$(cat beat); [ \"$a\" != \"$b\" ] && break; done; if [ \"$a\" != \"$b\" ]; then echo job-alive; else echo job-still; fi"
		const still = "a=$(cat beat); sleep 2; b=$(cat beat); if [ \"$a\" = \"$b\" ]; then echo job-gone; else echo job-beats; fi"
		By("a background job starts, and its call is observed once it did")
		job := observedIntent(ctx, create(ctx, map[string]any{"command": "i=0; while :; do i=$((i+1)); echo tick; echo $i > beat.new; mv beat.new beat; sleep 0.2; done", "runInBackground": true}))
		Expect(job.Status.Observation.Summary).To(ContainSubstring("[background job started: "+job.Name+"]"), job.Status.Observation.Summary)
		jobPod := executionOf(ctx, job).Status.SessionName
		Expect(jobPod).To(HavePrefix(executor.SessionPrefix))

		By("it outlives its call and the next ones, which run in the task's session, never beside it")
		_, next := propose(ctx, beating+"; sleep 302 > /dev/null 2>&1 & echo $! > left.pid")
		Expect(next.Status.Output).To(ContainSubstring("job-alive"))
		Expect(next.Status.SessionName).NotTo(Equal(jobPod), "a call ran in the background job's pod")
		_, again := propose(ctx, beating+"; if kill -0 $(cat left.pid) 2>/dev/null; then echo left-alive; else echo left-gone; fi")
		Expect(again.Status.Output).To(ContainSubstring("job-alive"))
		Expect(again.Status.Output).To(ContainSubstring("left-gone"), "a process an earlier call left behind survived")

		By("job_output shows what it printed so far")
		out := observedIntent(ctx, createTool(ctx, toolgatev1alpha1.ToolJobOutput, map[string]any{"job": job.Name}))
		Expect(out.Status.Observation.Summary).To(ContainSubstring("[job "+job.Name+": running since"), out.Status.Observation.Summary)
		Expect(out.Status.Observation.Summary).To(ContainSubstring("tick\ntick\n"))

		By("job_kill stops its whole tree, and its pod goes")
		kill := observedIntent(ctx, createTool(ctx, toolgatev1alpha1.ToolJobKill, map[string]any{"job": job.Name}))
		Expect(kill.Status.Observation.Summary).To(ContainSubstring("job "+job.Name+" was stopped"), kill.Status.Observation.Summary)
		Eventually(func(g Gomega) {
			killed := executionOf(ctx, job)
			g.Expect(killed.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorAborted), killed.Status.Message)
			g.Expect(killed.Status.Message).To(ContainSubstring(kill.Name + " (job_kill) stopped it"))
			g.Expect(killed.Status.Output).To(ContainSubstring("tick"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		_, after := propose(ctx, still)
		Expect(after.Status.Output).To(ContainSubstring("job-gone"))
		Eventually(func(g Gomega) {
			pod := &corev1.Pod{}
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: jobPod}, pod)
			g.Expect(err == nil && pod.DeletionTimestamp == nil).To(BeFalse(), "the ended job's pod %s is still there", jobPod)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())

		By("a job still running when its task ends is stopped with it")
		second := observedIntent(ctx, create(ctx, map[string]any{"command": "sleep 600 > slept.txt", "runInBackground": true}))
		// A merge patch, not a read and an update: the controller writes the task
		// meanwhile, and an update of the version read would conflict.
		t := &toolgatev1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: task}}
		Expect(mergePatch(ctx, k8s, t, map[string]any{"spec": map[string]any{"lifecycle": string(toolgatev1alpha1.LifecycleCancelled)}})).To(Succeed())
		Eventually(func(g Gomega) {
			exec := executionOf(ctx, second)
			g.Expect(exec.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorAborted), exec.Status.Message)
			g.Expect(exec.Status.Message).To(ContainSubstring("AgentTask " + task + " ended"))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{toolgatev1alpha1.LabelSession})).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	})

	It("replaces a session whose call stopped its own runner, so what it left running never sees the next call", func(ctx SpecContext) {
		// The attack: keep a process alive after the call by stopping the runner that
		// would kill it (same uid), then let it write into the workspace.
		intent := observedIntent(ctx, create(ctx, map[string]any{"command": "(while :; do echo tick >> ticks.txt; sleep 0.2; done) > /dev/null 2>&1 & sleep 1; kill -STOP $PPID", "timeoutMs": 2000}))
		stopped := executionOf(ctx, intent)
		Expect(stopped.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorException), stopped.Status.Message)
		Expect(stopped.Status.Message).To(ContainSubstring("replaced before the next call"))

		_, next := propose(ctx, "echo next > next.txt; test -s ticks.txt && echo the-earlier-call-ticked; wc -l < ticks.txt > count1.txt; sleep 1; wc -l < ticks.txt > count2.txt; cmp count1.txt count2.txt && echo no-ticks")
		Expect(next.Status.SessionName).To(Equal(stopped.Status.SessionName))
		Expect(next.Status.Output).To(ContainSubstring("the-earlier-call-ticked"), "the attack never ran: %s", next.Status.Output)
		Expect(next.Status.Output).To(ContainSubstring("no-ticks"), "a process of the earlier call still writes into the workspace")
	})

	It("fails the call of a session pod that dies mid-call with a clear Exception, and starts a fresh session for the next", func(ctx SpecContext) {
		intent := create(ctx, map[string]any{"command": "echo begun > begun.txt; sleep 120"})
		exec := &toolgatev1alpha1.Execution{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: intent.Name}, exec)).To(Succeed())
			g.Expect(exec.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionRunning))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		dead := sessionPod(ctx, exec)
		// The pod dies once the tool has started: its marker is in the workspace, as
		// a pod mounting the claim reads it (nobody but the controller execs into a
		// session pod, not even a cluster admin).
		Eventually(func() string {
			return workspaceFiles(ctx, ns, claim, "begun.txt")["begun.txt"]
		}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Equal("begun\n"), "the tool never started")
		Expect(k8s.Delete(ctx, dead)).To(Succeed())

		intent = observedIntent(ctx, intent)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(exec), exec)).To(Succeed())
		Expect(exec.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorException), exec.Status.Message)
		Expect(exec.Status.Message).To(ContainSubstring("session pod " + dead.Name))
		Expect(intent.Status.Observation.Outcome).NotTo(Equal(toolgatev1alpha1.OutcomeSucceeded))

		next, nextExec := propose(ctx, "echo after > after.txt; cat after.txt")
		Expect(next.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), next.Status.Observation.Summary)
		fresh := sessionPod(ctx, nextExec)
		Expect(fresh.Name).To(Equal(dead.Name))
		Expect(fresh.UID).NotTo(Equal(dead.UID), "the next call ran in the dead session")
	})
})
