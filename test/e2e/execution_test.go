//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
)

// execution is an Execution to create directly, as the controller would after an
// Allow: the specs here test the executor on a real kubelet, not the pipeline.
// runAsController plays the ToolIntent controller's part so that the Execution
// reconciler's chain check, which runs only an intent's own Execution, lets it run.
type execution struct {
	name           string
	tool           toolgatev1alpha1.ToolName
	input          map[string]any
	timeoutSeconds int32
	maxOutputBytes int32
	baseline       string
	network        toolgatev1alpha1.NetworkSpec // the sandbox's; the zero value is None
}

// run creates the Execution and waits until it is Complete.
func run(ctx context.Context, ns, claim string, e execution) *toolgatev1alpha1.Execution {
	GinkgoHelper()
	input, err := json.Marshal(e.input)
	Expect(err).NotTo(HaveOccurred())
	if e.timeoutSeconds == 0 {
		e.timeoutSeconds = 60
	}
	if e.maxOutputBytes == 0 {
		e.maxOutputBytes = 64 * 1024
	}
	obj := &toolgatev1alpha1.Execution{
		ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: ns},
		Spec: toolgatev1alpha1.ExecutionSpec{
			IntentRef:      toolgatev1alpha1.LocalObjectReference{Name: e.name},
			TaskRef:        toolgatev1alpha1.LocalObjectReference{Name: noTask},
			Tool:           e.tool,
			Input:          runtime.RawExtension{Raw: input},
			TimeoutSeconds: e.timeoutSeconds,
			MaxOutputBytes: e.maxOutputBytes,
			BaselineSHA256: e.baseline,
			Sandbox: toolgatev1alpha1.SandboxProfile{
				Image:              workspaceImage,
				WorkspaceClaimName: claim,
				Network:            e.network,
			},
		},
	}
	runAsController(ctx, obj)
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(obj.Status.Conditions, toolgatev1alpha1.ConditionComplete)).To(BeTrue(),
			"Execution %s is not Complete: phase %q, conditions %v", obj.Name, obj.Status.Phase, obj.Status.Conditions)
	}).WithContext(ctx).WithTimeout(time.Duration(e.timeoutSeconds)*time.Second + 2*time.Minute).WithPolling(time.Second).Should(Succeed())
	return obj
}

// noTask is the task the executor specs' intents name: it does not exist, so the
// ToolIntent controller never takes up their calls, which this suite runs itself.
const noTask = "e2e"

// runAsController creates exec the way the ToolIntent controller does after an
// Allow: its ToolIntent first (taskRef noTask), whose status records the validation,
// the decision with its sandbox and fingerprint, and exec as its Execution, marked
// Observed so that the ToolIntent controller leaves it alone; then exec, controlled
// by that intent.
func runAsController(ctx context.Context, exec *toolgatev1alpha1.Execution) {
	GinkgoHelper()
	intent := &toolgatev1alpha1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Name: exec.Spec.IntentRef.Name, Namespace: exec.Namespace},
		Spec: toolgatev1alpha1.ToolIntentSpec{
			TaskRef: exec.Spec.TaskRef, Tool: exec.Spec.Tool, Input: *exec.Spec.Input.DeepCopy(),
			RequestedBy: whoAmI(ctx),
		},
	}
	Expect(k8s.Create(ctx, intent)).To(Succeed())
	// Only the controller writes an intent's status and creates Executions (the
	// admission policies of config/admission): the suite does both as the controller's
	// service account.
	asController := actingAs(controllerServiceAccount, controllerGroups...)
	if exec.Spec.Fingerprint == "" {
		exec.Spec.Fingerprint = "e2e-" + exec.Name
	}
	// The ToolIntent controller may get to the intent first (and find no task): the
	// status is written until it is this one.
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intent), intent)).To(Succeed())
		intent.Status = toolgatev1alpha1.ToolIntentStatus{
			Validation: &toolgatev1alpha1.Validation{TimeoutSeconds: exec.Spec.TimeoutSeconds, BaselineSHA256: exec.Spec.BaselineSHA256},
			Decision: &toolgatev1alpha1.Decision{
				Action: toolgatev1alpha1.DecisionAllow, PolicyRuleRef: toolgatev1alpha1.ModeDefaultReference(toolgatev1alpha1.ModeEdit), Fingerprint: exec.Spec.Fingerprint,
				Walls: exec.Spec.Walls.DeepCopy(),
				Sandbox: &toolgatev1alpha1.DecidedSandbox{
					Profile: *exec.Spec.Sandbox.DeepCopy(), TimeoutSeconds: exec.Spec.TimeoutSeconds,
					MaxOutputBytes: exec.Spec.MaxOutputBytes, Workdir: exec.Spec.Workdir, Env: exec.Spec.Env,
				},
			},
			ExecutionName: exec.Name,
			Conditions: []metav1.Condition{{
				Type: toolgatev1alpha1.ConditionObserved, Status: metav1.ConditionTrue, Reason: "RunByTheSuite",
				Message: "the e2e suite runs this call itself", LastTransitionTime: metav1.Now(),
			}},
		}
		g.Expect(asController.Status().Update(ctx, intent)).To(Succeed())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	yes := true
	exec.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "ToolIntent", Name: intent.Name, UID: intent.UID,
		Controller: &yes, BlockOwnerDeletion: &yes,
	}}
	Expect(asController.Create(ctx, exec)).To(Succeed())
}

func bash(name, command string) execution {
	return execution{name: name, tool: toolgatev1alpha1.ToolBash, input: map[string]any{"command": command}}
}

func exitCode(e *toolgatev1alpha1.Execution) int32 {
	GinkgoHelper()
	Expect(e.Status.ExitCode).NotTo(BeNil(), "Execution %s has no exit code: %+v", e.Name, e.Status)
	return *e.Status.ExitCode
}

var _ = Describe("Executions on a real cluster", func() {
	var ns, claim string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		claim = newWorkspace(ctx, ns)
	})

	It("observes a failing and a passing command's exit codes", func(ctx SpecContext) {
		failed := run(ctx, ns, claim, bash("fails", "echo about to fail; exit 1"))
		Expect(failed.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))
		Expect(exitCode(failed)).To(Equal(int32(1)))
		Expect(failed.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorExitCode))
		Expect(failed.Status.Output).To(ContainSubstring("about to fail"))

		passed := run(ctx, ns, claim, bash("passes", "echo fine"))
		Expect(passed.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionSucceeded))
		Expect(exitCode(passed)).To(Equal(int32(0)))
		Expect(passed.Status.ErrorKind).To(BeEmpty())
		Expect(passed.Status.Output).To(ContainSubstring("fine"))

		By("the Job ran once, with no retry")
		// The Job controller counts the failed pod after the Execution has read it,
		// so the count is awaited; it must settle at one failure and no success.
		var job batchv1.Job
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: failed.Status.JobName}, &job)).To(Succeed())
			g.Expect(job.Status.Failed).To(Equal(int32(1)))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(job.Status.Succeeded).To(BeZero())
	})

	It("kills the whole process tree at the timeout and says Timeout", func(ctx SpecContext) {
		// A background child that would outlive a shell killed alone writes a marker
		// after the timeout; a later Execution checks that it never did.
		e := bash("sleeps", "(sleep 8; echo survived > survivor.txt) & sleep 60")
		e.timeoutSeconds = 3
		timedOut := run(ctx, ns, claim, e)
		Expect(timedOut.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))
		Expect(timedOut.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorTimeout))
		Expect(exitCode(timedOut)).To(Equal(int32(124)))
		Expect(timedOut.Status.DurationMillis).To(BeNumerically("<", 30_000))

		time.Sleep(8 * time.Second)
		check := run(ctx, ns, claim, bash("check-survivor", "test ! -e survivor.txt"))
		Expect(exitCode(check)).To(BeZero(), "a child of the timed-out command kept running and wrote survivor.txt")
	})

	It("caps and flags a flood of output while the pod's log keeps all of it", func(ctx SpecContext) {
		const lines = 200_000 // about 2.5 MB of "line N" lines
		// The pause after the flood lets the runtime drain the pipe: containerd 1.6 drops
		// the last kilobytes of a container's log when it exits right after a burst of
		// megabytes (the runner's own copy, checked below, has every byte either way).
		e := bash("flood", fmt.Sprintf("seq 1 %d | sed 's/^/line /'; sleep 2", lines))
		e.maxOutputBytes = 4096
		flood := run(ctx, ns, claim, e)
		Expect(exitCode(flood)).To(BeZero())
		Expect(flood.Status.Truncated).To(BeTrue())
		Expect(len(flood.Status.Output)).To(BeNumerically("<=", 4096+1024), "the captured output is not capped")
		Expect(flood.Status.StdoutBytes).To(BeNumerically(">", 2_000_000))
		Expect(flood.Status.Output).To(ContainSubstring("line 1\n"))
		Expect(flood.Status.Output).To(ContainSubstring(fmt.Sprintf("line %d", lines)))

		log, err := kubectl(ctx, "logs", "-n", ns, flood.Status.PodName, "-c", "tool")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Count(log, "\n")).To(BeNumerically(">=", lines))
		Expect(log).To(ContainSubstring("line 123456\n"))
		Expect(log).To(HaveSuffix(fmt.Sprintf("line %d\n", lines)))

		By("the runner's full copy in the workspace has every line")
		Expect(flood.Status.ArtifactPath).NotTo(BeEmpty())
		count := run(ctx, ns, claim, bash("count", fmt.Sprintf("wc -l < %q; tail -n 1 %q", flood.Status.ArtifactPath, flood.Status.ArtifactPath)))
		Expect(count.Status.Output).To(ContainSubstring(fmt.Sprintf("%d\nline %d\n", lines, lines)))
	})

	It("runs as a non-root user with a read-only root filesystem", func(ctx SpecContext) {
		e := run(ctx, ns, claim, bash("whoami", "id -u; touch /probe 2>&1; touch ok-in-workspace && echo workspace-writable"))
		Expect(exitCode(e)).To(BeZero())
		Expect(e.Status.Sandbox).NotTo(BeNil(), "the runner reported nothing about its sandbox")
		Expect(e.Status.Sandbox.UID).NotTo(BeZero())
		Expect(e.Status.Sandbox.ReadOnlyRootFilesystem).To(BeTrue())
		Expect(e.Status.Output).To(ContainSubstring(fmt.Sprintf("%d\n", e.Status.Sandbox.UID)))
		Expect(e.Status.Output).To(ContainSubstring("Read-only file system"))
		Expect(e.Status.Output).To(ContainSubstring("workspace-writable"))
	})

	It("writes nothing through a symlink that leaves the workspace", func(ctx SpecContext) {
		// An absolute symlink is outside the workspace by definition, even when it
		// names a folder that is in it: that folder is where an unconfined write would
		// land, so it is where the check looks.
		setup := run(ctx, ns, claim, bash("symlink", "mkdir target && ln -s /workspace/target escape && ln -s ../.. up"))
		Expect(exitCode(setup)).To(BeZero())

		write := run(ctx, ns, claim, execution{
			name: "write-escape", tool: toolgatev1alpha1.ToolWriteFile,
			input:    map[string]any{"path": "escape/pwned.txt", "content": "pwned\n"},
			baseline: protocol.BaselineAbsent,
		})
		Expect(write.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))
		Expect(write.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorException))
		Expect(write.Status.Message).To(ContainSubstring("escape/pwned.txt"))

		up := run(ctx, ns, claim, execution{
			name: "write-up", tool: toolgatev1alpha1.ToolWriteFile,
			input:    map[string]any{"path": "up/pwned.txt", "content": "pwned\n"},
			baseline: protocol.BaselineAbsent,
		})
		Expect(up.Status.Phase).To(Equal(toolgatev1alpha1.ExecutionFailed))

		check := run(ctx, ns, claim, bash("check-escape", "ls -A target; test -z \"$(ls -A target)\""))
		Expect(exitCode(check)).To(BeZero(), "something was written through the symlink: %s", check.Status.Output)
	})

	It("runs read-only tools and edits files on the workspace", func(ctx SpecContext) {
		write := run(ctx, ns, claim, execution{
			name: "write", tool: toolgatev1alpha1.ToolWriteFile,
			input:    map[string]any{"path": "notes/hello.txt", "content": "hello\nworld\n"},
			baseline: protocol.BaselineAbsent,
		})
		Expect(exitCode(write)).To(BeZero(), write.Status.Message)

		read := run(ctx, ns, claim, execution{name: "read", tool: toolgatev1alpha1.ToolReadFile, input: map[string]any{"path": "notes/hello.txt"}})
		Expect(exitCode(read)).To(BeZero(), read.Status.Message)
		Expect(read.Status.Output).To(ContainSubstring("world"))
		Expect(read.Status.Facts).NotTo(BeNil())
		baseline := read.Status.Facts.ContentSHA256
		Expect(baseline).NotTo(BeEmpty())

		edit := run(ctx, ns, claim, execution{
			name: "edit", tool: toolgatev1alpha1.ToolEditFile,
			input:    map[string]any{"path": "notes/hello.txt", "oldText": "world", "newText": "cluster"},
			baseline: baseline,
		})
		Expect(exitCode(edit)).To(BeZero(), edit.Status.Message)

		// The file changed since that read: a second edit with the same baseline is Stale.
		stale := run(ctx, ns, claim, execution{
			name: "edit-stale", tool: toolgatev1alpha1.ToolEditFile,
			input:    map[string]any{"path": "notes/hello.txt", "oldText": "hello", "newText": "bye"},
			baseline: baseline,
		})
		Expect(stale.Status.ErrorKind).To(Equal(toolgatev1alpha1.ErrorStale))

		cat := run(ctx, ns, claim, bash("cat", "cat notes/hello.txt"))
		Expect(cat.Status.Output).To(ContainSubstring("hello\ncluster\n"))
	})

	It("deletes a spent Job and its pod, and keeps the record", func(ctx SpecContext) {
		e := run(ctx, ns, claim, bash("spent", "echo spent"))
		Expect(e.Status.JobName).NotTo(BeEmpty())
		Expect(e.Status.PodName).NotTo(BeEmpty())
		// The Execution holds the whole result, so the Job goes --spent-job-ttl (a
		// minute) after it finished, and the garbage collector takes its pod.
		Eventually(func(g Gomega) {
			g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: e.Status.JobName}, &batchv1.Job{}))).To(BeTrue(), "Job %s still exists", e.Status.JobName)
			g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: e.Status.PodName}, &corev1.Pod{}))).To(BeTrue(), "pod %s still exists", e.Status.PodName)
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
		Expect(e.Status.Output).To(Equal("spent\n"))
		Expect(exitCode(e)).To(Equal(int32(0)))
	})

	It("deletes the Job with the Execution", func(ctx SpecContext) {
		e := run(ctx, ns, claim, bash("owned", "true"))
		Expect(k8s.Delete(ctx, e, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
		Eventually(func() bool {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: e.Status.JobName}, &batchv1.Job{})
			return apierrors.IsNotFound(err)
		}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())
	})
})
