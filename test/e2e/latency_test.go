//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// latencySamples is how many calls of each kind the latency benchmark makes.
const latencySamples = 10

// latency is a sample's p50 and p99 (nearest rank), for the report.
type latency struct{ p50, p99 time.Duration }

func percentiles(samples []time.Duration) latency {
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return latency{rank(0.50), rank(0.99)}
}

// The benchmark of a tool call's latency on the real cluster, from the ToolIntent's
// creation to its observation, beside the floor: a bare `kubectl exec` of the same
// command into a pod that is already running. It asserts nothing about time (the
// numbers go to docs/benchmarks.md); `make bench-e2e` runs it, `make test-e2e` does
// not.
var _ = Describe("Tool call latency", Label("bench"), func() {
	const task = "latency"
	It("measures sequential calls from intent to observation, beside a bare kubectl exec", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		claim := newWorkspace(ctx, ns)
		me := whoAmI(ctx)
		seedWorkspace(ctx, ns, claim, map[string]string{
			"calc.sh": "echo $(($1 + $2))\n",
			"test.sh": "got=$(sh calc.sh 2 3)\nif [ \"$got\" = 5 ]; then echo \"PASS: 2 + 3 = 5\"; else echo \"FAIL: 2 + 3 gave $got\"; exit 1; fi\n",
		})
		Expect(k8s.Create(ctx, &toolgatev1alpha1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "latency", Namespace: ns},
			Spec: toolgatev1alpha1.ToolPolicySpec{Rules: []toolgatev1alpha1.PolicyRule{{
				Name: "run-tests", Action: toolgatev1alpha1.RuleAllow,
				Match:  toolgatev1alpha1.RuleMatch{Commands: []toolgatev1alpha1.CommandPattern{pattern("sh", "test.sh")}},
				Reason: "The test script only reads the workspace.",
			}}},
		})).To(Succeed())
		isolations := []toolgatev1alpha1.SandboxIsolation{toolgatev1alpha1.IsolationSession, toolgatev1alpha1.IsolationPerCall}
		taskOf := func(isolation toolgatev1alpha1.SandboxIsolation) string {
			return task + "-" + strings.ToLower(string(isolation))
		}
		for _, isolation := range isolations {
			Expect(k8s.Create(ctx, &toolgatev1alpha1.AgentTask{
				ObjectMeta: metav1.ObjectMeta{Name: taskOf(isolation), Namespace: ns},
				Spec: toolgatev1alpha1.AgentTaskSpec{
					Goal: "Measure.", Mode: toolgatev1alpha1.ModeEdit,
					Workspace: toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
					Sandbox:   toolgatev1alpha1.SandboxSpec{Isolation: isolation},
					Agent:     toolgatev1alpha1.AgentSpec{External: &toolgatev1alpha1.ExternalAgent{Description: "the latency benchmark", Proposers: toolgatev1alpha1.Proposers{Users: []string{me}}}},
					Budgets:   toolgatev1alpha1.Budgets{MaxTurns: 200, MaxIntents: 200},
				},
			})).To(Succeed())
		}
		By("waiting for the session task's warm sessions")
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{"toolgate.dev/session"})).To(Succeed())
			running := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			g.Expect(running).To(Equal(2))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())

		By("the floor: kubectl exec into a running pod with the workspace")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "floor", Namespace: ns},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				SecurityContext:              &corev1.PodSecurityContext{FSGroup: ptr.To[int64](65532)},
				Containers: []corev1.Container{{
					Name: "c", Image: workspaceImage, ImagePullPolicy: corev1.PullIfNotPresent,
					Command:         []string{"/bin/sh", "-c", "exec sleep 3600"},
					WorkingDir:      "/workspace",
					SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532)},
					VolumeMounts:    []corev1.VolumeMount{{Name: "ws", MountPath: "/workspace"}},
				}},
				Volumes: []corev1.Volume{{Name: "ws", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
			},
		}
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		floor := func(command string) latency {
			var samples []time.Duration
			for range latencySamples {
				start := time.Now()
				out, err := exec.CommandContext(ctx, "kubectl", "-n", ns, "exec", pod.Name, "--", "/bin/sh", "-c", command).CombinedOutput()
				samples = append(samples, time.Since(start))
				Expect(err).NotTo(HaveOccurred(), "kubectl exec: %s", out)
			}
			return percentiles(samples)
		}

		turn := int32(0)
		var isolation toolgatev1alpha1.SandboxIsolation
		// wallChecks are how long the runner took to prove each Job's walls before
		// its tool started, from the runner's result in its pod's termination
		// message (a session call's result goes to the controller only).
		var wallChecks []time.Duration
		call := func(tool toolgatev1alpha1.ToolName, input map[string]any, want string) latency {
			GinkgoHelper()
			task := taskOf(isolation)
			raw, err := json.Marshal(input)
			Expect(err).NotTo(HaveOccurred())
			var samples []time.Duration
			for range latencySamples {
				turn++
				intent := &toolgatev1alpha1.ToolIntent{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-t%d-0", task, turn), Namespace: ns},
					Spec: toolgatev1alpha1.ToolIntentSpec{
						TaskRef: toolgatev1alpha1.LocalObjectReference{Name: task}, Turn: turn, Tool: tool,
						Input: runtime.RawExtension{Raw: raw}, RequestedBy: me,
					},
				}
				start := time.Now()
				Expect(k8s.Create(ctx, intent)).To(Succeed())
				Eventually(func(g Gomega) {
					g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())
					g.Expect(meta.IsStatusConditionTrue(intent.Status.Conditions, toolgatev1alpha1.ConditionObserved)).To(BeTrue())
				}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(20 * time.Millisecond).Should(Succeed())
				samples = append(samples, time.Since(start))
				Expect(intent.Status.Observation.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), intent.Status.Observation.Summary)
				Expect(intent.Status.Observation.Summary).To(ContainSubstring(want))
				if isolation == toolgatev1alpha1.IsolationPerCall {
					wallChecks = append(wallChecks, wallCheck(ctx, ns, intent.Status.ExecutionName))
				}
			}
			return percentiles(samples)
		}

		rows := []struct {
			name    string
			command string
			measure func() latency
		}{
			{"read_file calc.sh", "cat calc.sh", func() latency {
				return call(toolgatev1alpha1.ToolReadFile, map[string]any{"path": "calc.sh"}, "$1 + $2")
			}},
			{"list_dir .", "ls -la", func() latency {
				return call(toolgatev1alpha1.ToolListDir, map[string]any{"path": "."}, "calc.sh")
			}},
			{"grep PASS", "grep -rn PASS .", func() latency {
				return call(toolgatev1alpha1.ToolGrep, map[string]any{"pattern": "PASS"}, "test.sh")
			}},
			{"bash cat calc.sh (read-only)", "cat calc.sh", func() latency {
				return call(toolgatev1alpha1.ToolBash, map[string]any{"command": "cat calc.sh"}, "$1 + $2")
			}},
			{"bash sh test.sh (allowed by policy)", "sh test.sh", func() latency {
				return call(toolgatev1alpha1.ToolBash, map[string]any{"command": "sh test.sh"}, "PASS")
			}},
		}
		var report strings.Builder
		fmt.Fprintf(&report, "%d sequential calls each, intent created to Observed, beside kubectl exec of the same command:\n", latencySamples)
		fmt.Fprintf(&report, "| call | isolation | p50 | p99 | kubectl exec p50 | kubectl exec p99 | p50 / exec p50 |\n|---|---|---|---|---|---|---|\n")
		for _, r := range rows {
			for _, isolation = range isolations {
				By("measuring " + r.name + " with isolation " + string(isolation))
				got, base := r.measure(), floor(r.command)
				fmt.Fprintf(&report, "| %s | %s | %d ms | %d ms | %d ms | %d ms | %.1f× |\n", r.name, isolation,
					got.p50.Milliseconds(), got.p99.Milliseconds(), base.p50.Milliseconds(), base.p99.Milliseconds(),
					float64(got.p50)/float64(base.p50))
			}
		}
		walls := percentiles(wallChecks)
		fmt.Fprintf(&report, "\nThe runner proving the walls before the tool, %d PerCall calls (part of the latency above): p50 %d ms, p99 %d ms\n",
			len(wallChecks), walls.p50.Milliseconds(), walls.p99.Milliseconds())
		AddReportEntry("tool call latency", report.String())
		GinkgoWriter.Print(report.String())
	})
})

// wallCheck is how long the runner of an Execution's Job took to prove its walls
// (the result's wallCheckMs), read from its pod's termination message.
func wallCheck(ctx SpecContext, ns, execution string) time.Duration {
	GinkgoHelper()
	exec := &toolgatev1alpha1.Execution{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: execution}, exec)).To(Succeed())
	pod := &corev1.Pod{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: exec.Status.PodName}, pod)).To(Succeed())
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "tool" && cs.State.Terminated != nil {
			var res struct {
				WallCheckMs int64 `json:"wallCheckMs"`
			}
			Expect(json.Unmarshal([]byte(cs.State.Terminated.Message), &res)).To(Succeed())
			return time.Duration(res.WallCheckMs) * time.Millisecond
		}
	}
	Fail("pod " + pod.Name + " has no terminated tool container")
	return 0
}
