package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// fixedLog stands in for the pods/log subresource: envtest runs no kubelet, so no
// container log can be read. It returns a fixed text cut to LimitBytes, and records
// that every request was bounded.
type fixedLog struct {
	text string
	mu   sync.Mutex
	reqs []corev1.PodLogOptions
}

func (l *fixedLog) ReadLog(_ context.Context, _, _ string, opts corev1.PodLogOptions) ([]byte, error) {
	l.mu.Lock()
	l.reqs = append(l.reqs, opts)
	l.mu.Unlock()
	b := []byte(l.text)
	if opts.LimitBytes == nil {
		return nil, fmt.Errorf("unbounded log read")
	}
	if int64(len(b)) > *opts.LimitBytes {
		b = b[:*opts.LimitBytes]
	}
	return b, nil
}

func (l *fixedLog) requests() []corev1.PodLogOptions {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]corev1.PodLogOptions(nil), l.reqs...)
}

// startExecutionManager starts a manager running only the Execution controller, with
// logs read from logs instead of the kubelet.
func startExecutionManager(t *testing.T, logs executor.LogReader) ctrl.Manager {
	mgr, _ := startManager(t, func(mgr ctrl.Manager, opts Options) error {
		r, err := newExecutionReconciler(mgr, opts)
		if err != nil {
			return err
		}
		r.Logs = logs
		return r.SetupWithManager(mgr)
	})
	return mgr
}

// createExecution creates exec as the ToolIntent controller would: owned by an intent
// (created here) whose status allowed exactly this call and names exec as its
// Execution, so that the Execution controller's chain check lets it run.
func createExecution(t *testing.T, exec *toolgatev1alpha1.Execution) {
	t.Helper()
	intent := createIntentFor(t, exec, func(intent *toolgatev1alpha1.ToolIntent) {
		intent.Status.ExecutionName = exec.Name
	})
	ownBy(t, exec, intent)
	createBareExecution(t, exec)
}

// createBareExecution creates exec as it is: what an admin, or a compromised path
// past admission, could create directly.
func createBareExecution(t *testing.T, exec *toolgatev1alpha1.Execution) {
	t.Helper()
	if err := env.Client.Create(t.Context(), exec); err != nil {
		t.Fatalf("creating Execution: %v", err)
	}
}

// eventually polls cond until it holds or 30s pass.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
}

func getExecution(t *testing.T, ns, name string) *toolgatev1alpha1.Execution {
	t.Helper()
	exec := &toolgatev1alpha1.Execution{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, exec); err != nil {
		t.Fatalf("getting Execution: %v", err)
	}
	return exec
}

func waitForPhase(t *testing.T, ns, name string, phase toolgatev1alpha1.ExecutionPhase) *toolgatev1alpha1.Execution {
	t.Helper()
	var exec *toolgatev1alpha1.Execution
	eventually(t, "phase "+string(phase), func() (bool, string) {
		exec = getExecution(t, ns, name)
		return exec.Status.Phase == phase, fmt.Sprintf("%+v", exec.Status)
	})
	return exec
}

func waitForJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	eventually(t, "the Job", func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, job)
		return err == nil, fmt.Sprint(err)
	})
	return job
}

func listJobs(t *testing.T, ns string) []batchv1.Job {
	t.Helper()
	jobs := &batchv1.JobList{}
	if err := env.Client.List(t.Context(), jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return jobs.Items
}

// createJobPod creates the pod the Job controller would create (envtest runs no Job
// controller): the Job's pod template, its labels, and the Job as controller.
func createJobPod(t *testing.T, job *batchv1.Job) *corev1.Pod {
	t.Helper()
	pod := testenv.JobPod(job, "-x7k2p")
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatalf("creating the Job's pod: %v", err)
	}
	return pod
}

// setPodStatus writes the status the kubelet would report (envtest runs no kubelet).
func setPodStatus(t *testing.T, pod *corev1.Pod, phase corev1.PodPhase, tool corev1.ContainerState) {
	t.Helper()
	started := metav1.NewTime(time.Now().Add(-2 * time.Second).Truncate(time.Second))
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = phase
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name: executor.InstallContainerName, Image: testRunnerImage, ImageID: "runner@sha256:1",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: started}},
	}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: executor.ToolContainerName, Image: testSandboxImage, ImageID: "workspace@sha256:1", State: tool,
		Started: ptr.To(tool.Running != nil),
	}}
	if err := env.Client.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("setting pod status: %v", err)
	}
}

func terminated(exitCode int32, message string) corev1.ContainerState {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: exitCode, Reason: "Completed", Message: message,
		StartedAt: metav1.NewTime(now.Add(-time.Second)), FinishedAt: now,
	}}
}

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Truncate(time.Second))}}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func completeCondition(t *testing.T, exec *toolgatev1alpha1.Execution) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(exec.Status.Conditions, toolgatev1alpha1.ConditionComplete)
	if c == nil {
		t.Fatalf("no Complete condition in %+v", exec.Status)
	}
	return c
}

// eventReasons lists the reasons of the events about the Execution.
func eventReasons(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := env.Client.List(t.Context(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, e := range list.Items {
		if e.Regarding.Kind == "Execution" && e.Regarding.Name == name {
			reasons[e.Reason] = e.Type
		}
	}
	return reasons
}

func TestExecutionSucceeds(t *testing.T) {
	ns := env.Namespace(t)
	const out = "hello\n"
	logs := &fixedLog{text: out}
	startExecutionManager(t, logs)
	createExecution(t, fixtures.Execution(ns, "run-ok"))

	job := waitForJob(t, ns, "run-ok")
	exec := getExecution(t, ns, "run-ok")
	if !metav1.IsControlledBy(job, exec) {
		t.Errorf("Job owners = %+v, want the Execution as controller", job.OwnerReferences)
	}
	if ptr.Deref(job.Spec.BackoffLimit, -1) != 0 || job.Spec.Template.Labels[toolgatev1alpha1.LabelExecution] != "run-ok" {
		t.Errorf("Job was not built by executor.BuildJob: %+v", job.Spec)
	}
	policy := &networkingv1.NetworkPolicy{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: executor.NetworkPolicyName(exec)}, policy); err != nil {
		t.Fatalf("no NetworkPolicy: %v", err)
	}
	if len(policy.OwnerReferences) != 0 || len(policy.Spec.Egress) != 0 || policy.Spec.PodSelector.MatchLabels[toolgatev1alpha1.LabelNetwork] != job.Spec.Template.Labels[toolgatev1alpha1.LabelNetwork] {
		t.Errorf("NetworkPolicy = %+v, want a deny-all of no owner that selects the Job's pod %v", policy, job.Spec.Template.Labels)
	}
	// Deleted while the call runs, it is made again.
	if err := env.Client.Delete(t.Context(), policy); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the NetworkPolicy made again", func() (bool, string) {
		again := &networkingv1.NetworkPolicy{}
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: executor.NetworkPolicyName(exec)}, again)
		return err == nil && again.UID != policy.UID, fmt.Sprint(err)
	})
	pending := waitForPhase(t, ns, "run-ok", toolgatev1alpha1.ExecutionPending)
	if pending.Status.JobName != "run-ok" {
		t.Errorf("status.jobName = %q, want run-ok", pending.Status.JobName)
	}

	pod := createJobPod(t, job)
	setPodStatus(t, pod, corev1.PodRunning, running())
	waitForPhase(t, ns, "run-ok", toolgatev1alpha1.ExecutionRunning)

	result := protocol.EncodeResult(protocol.Result{ExitCode: 0, DurationMs: 1500, StdoutBytes: int64(len(out)),
		OutputSHA256: sha256Hex(out), ArtifactPath: ".toolgate/executions/run-ok/output.log", UID: 65532, ReadOnlyRoot: true,
		InvocationSHA256: testenv.InvocationSHA256(pod)})
	setPodStatus(t, pod, corev1.PodSucceeded, terminated(0, string(result)))
	done := waitForPhase(t, ns, "run-ok", toolgatev1alpha1.ExecutionSucceeded)

	st := done.Status
	if ptr.Deref(st.ExitCode, -1) != 0 || st.Output != out || st.ErrorKind != "" || st.Message != "" ||
		st.PodName != pod.Name || st.DurationMillis != 1500 ||
		st.ArtifactPath != ".toolgate/executions/run-ok/output.log" || st.Sandbox == nil || st.Sandbox.UID != 65532 {
		t.Errorf("status = %+v", st)
	}
	if c := completeCondition(t, done); c.Status != metav1.ConditionTrue || c.Reason != toolgatev1alpha1.ReasonJobSucceeded {
		t.Errorf("Complete = %+v, want True/JobSucceeded", c)
	}
	for _, r := range logs.requests() {
		if r.LimitBytes == nil || *r.LimitBytes > int64(done.Spec.MaxOutputBytes) || r.Container != executor.ToolContainerName {
			t.Errorf("log request %+v is not a bounded read of the tool container", r)
		}
	}
	// A call that went as it should sends no event from its Execution (its intent's
	// Observed event tells it); its steps are in the status and the audit log. Events
	// are sent in the background: the moment run-ok's would have come is marked by
	// the Warning of a call that fails after it, sent by the same recorder.
	sentinel := fixtures.Execution(ns, "run-after")
	createExecution(t, sentinel)
	failed := createJobPod(t, waitForJob(t, ns, "run-after"))
	setPodStatus(t, failed, corev1.PodFailed, terminated(3, string(protocol.EncodeResult(protocol.Result{ExitCode: 3, ErrorKind: protocol.KindExitCode,
		StdoutBytes: int64(len(out)), OutputSHA256: sha256Hex(out), InvocationSHA256: testenv.InvocationSHA256(failed)}))))
	absent(t, moment{name: "the Warning Finished event of run-after, which failed after run-ok succeeded", passed: func() (bool, string) {
		reasons := eventReasons(t, ns, "run-after")
		return reasons[EventFinished] == "Warning", fmt.Sprint(reasons)
	}}, "an event of the successful Execution run-ok", func() bool { return len(eventReasons(t, ns, "run-ok")) != 0 })
}

func TestExecutionNonZeroExit(t *testing.T) {
	ns := env.Namespace(t)
	const out = "FAIL: TestX\n"
	startExecutionManager(t, &fixedLog{text: out})
	createExecution(t, fixtures.Execution(ns, "run-fail"))
	pod := createJobPod(t, waitForJob(t, ns, "run-fail"))
	result := protocol.EncodeResult(protocol.Result{ExitCode: 3, ErrorKind: protocol.KindExitCode, StdoutBytes: int64(len(out)), OutputSHA256: sha256Hex(out),
		InvocationSHA256: testenv.InvocationSHA256(pod)})
	setPodStatus(t, pod, corev1.PodFailed, terminated(3, string(result)))

	done := waitForPhase(t, ns, "run-fail", toolgatev1alpha1.ExecutionFailed)
	if done.Status.ErrorKind != toolgatev1alpha1.ErrorExitCode || ptr.Deref(done.Status.ExitCode, 0) != 3 || done.Status.Output != out {
		t.Errorf("status = %+v, want ExitCode 3 with the output", done.Status)
	}
	if c := completeCondition(t, done); c.Status != metav1.ConditionTrue || c.Reason != toolgatev1alpha1.ReasonJobFailed {
		t.Errorf("Complete = %+v, want True/JobFailed", c)
	}
	eventually(t, "a Warning Finished event", func() (bool, string) {
		reasons := eventReasons(t, ns, "run-fail")
		return reasons[EventFinished] == "Warning", fmt.Sprint(reasons)
	})
}

func TestExecutionTimeout(t *testing.T) {
	ns := env.Namespace(t)
	startExecutionManager(t, &fixedLog{})
	createExecution(t, fixtures.Execution(ns, "run-slow"))
	job := waitForJob(t, ns, "run-slow")
	waitForPhase(t, ns, "run-slow", toolgatev1alpha1.ExecutionPending)

	// Set by hand what the Job controller (not running in envtest) writes when
	// activeDeadlineSeconds passes; the pod was killed before the runner reported.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	job.Status.StartTime = ptr.To(metav1.NewTime(now.Add(-90 * time.Second)))
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, Message: "Job was active longer than specified deadline", LastTransitionTime: now, LastProbeTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, Message: "Job was active longer than specified deadline", LastTransitionTime: now, LastProbeTime: now},
	}
	job.Status.Failed = 1
	if err := env.Client.Status().Update(t.Context(), job); err != nil {
		t.Fatalf("setting the Job's status: %v", err)
	}

	done := waitForPhase(t, ns, "run-slow", toolgatev1alpha1.ExecutionFailed)
	if done.Status.ErrorKind != toolgatev1alpha1.ErrorTimeout || !strings.Contains(done.Status.Message, "deadline") {
		t.Errorf("status = %+v, want a Timeout that names the deadline", done.Status)
	}
}

func TestExecutionJobDeleted(t *testing.T) {
	ns := env.Namespace(t)
	mgr := startExecutionManager(t, &fixedLog{})
	createExecution(t, fixtures.Execution(ns, "run-gone"))
	job := waitForJob(t, ns, "run-gone")
	waitForPhase(t, ns, "run-gone", toolgatev1alpha1.ExecutionPending)

	if err := env.Client.Delete(t.Context(), job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	done := waitForPhase(t, ns, "run-gone", toolgatev1alpha1.ExecutionFailed)
	if done.Status.ErrorKind != toolgatev1alpha1.ErrorAborted || !strings.Contains(done.Status.Message, "deleted") {
		t.Errorf("status = %+v, want Aborted because the Job was deleted", done.Status)
	}
	// Aborted is final: the Job is not created again.
	absent(t, reconciledNow(t, mgr, "execution", done), "the deleted Job created again", func() bool { return len(listJobs(t, ns)) != 0 })
}

func TestExecutionMissingTerminationMessage(t *testing.T) {
	ns := env.Namespace(t)
	startExecutionManager(t, &fixedLog{text: "signal: killed\n"})
	createExecution(t, fixtures.Execution(ns, "run-silent"))
	pod := createJobPod(t, waitForJob(t, ns, "run-silent"))
	// The container exited 0 without a result: that must never read as a success.
	setPodStatus(t, pod, corev1.PodSucceeded, terminated(0, ""))

	done := waitForPhase(t, ns, "run-silent", toolgatev1alpha1.ExecutionFailed)
	if done.Status.ErrorKind != toolgatev1alpha1.ErrorException ||
		!strings.Contains(done.Status.Message, "the runner left no result in the termination message") {
		t.Errorf("status = %+v, want an Exception saying the result is missing", done.Status)
	}
	if done.Status.Output != "signal: killed\n" {
		t.Errorf("output = %q, want the log read anyway", done.Status.Output)
	}
}

// TestExecutionRestartMakesNoSecondJob drives the reconciler directly with an
// uncached client: one reconciler creates the Job and "crashes" before writing
// status; a fresh reconciler then finds the Job by its deterministic name.
func TestExecutionRestartMakesNoSecondJob(t *testing.T) {
	ns := env.Namespace(t)
	exec := fixtures.Execution(ns, "run-once")
	createExecution(t, exec)
	newReconciler := func() *ExecutionReconciler {
		return &ExecutionReconciler{
			Client: env.Client, APIReader: env.Client, Scheme: env.Scheme, Options: testOptions(),
			Logs: &fixedLog{}, Recorder: events.NewFakeRecorder(100), Now: time.Now,
		}
	}

	// First controller: creates the NetworkPolicy and Job, then stops before the
	// status write.
	first := newReconciler()
	_, created, err := first.runJob(t.Context(), getExecution(t, ns, "run-once"))
	if err != nil || !created {
		t.Fatalf("first observe: created=%v err=%v", created, err)
	}
	original := listJobs(t, ns)
	if len(original) != 1 {
		t.Fatalf("%d Jobs after the first controller, want 1", len(original))
	}
	if got := getExecution(t, ns, "run-once"); got.Status.JobName != "" {
		t.Fatalf("status was written (%+v); the crash must come before it", got.Status)
	}

	// Restarted controller, twice.
	second := newReconciler()
	for range 2 {
		if _, err := second.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "run-once"}}); err != nil {
			t.Fatalf("Reconcile after restart: %v", err)
		}
	}
	jobs := listJobs(t, ns)
	if len(jobs) != 1 || jobs[0].UID != original[0].UID {
		t.Fatalf("after the restart there are %d Jobs (want the original one)", len(jobs))
	}
	got := getExecution(t, ns, "run-once")
	if got.Status.JobName != "run-once" || got.Status.Phase != toolgatev1alpha1.ExecutionPending {
		t.Errorf("status = %+v, want Pending with the existing Job recorded", got.Status)
	}
}

// An Execution no Job can be built from fails JobInvalid, naming the field, and gets
// no Job: here a background job outside a session, which the API server cannot tell.
// (A malformed egress CIDR, the earlier example, is refused by the CRD in every kind
// that holds a sandbox, the Execution's included.)
func TestExecutionInvalidIsNotRun(t *testing.T) {
	ns := env.Namespace(t)
	startExecutionManager(t, &fixedLog{})
	badCIDR := fixtures.Execution(ns, "bad-cidr")
	badCIDR.Spec.Sandbox.Network = toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "not-a-cidr"}}}
	if err := env.Client.Create(t.Context(), badCIDR); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.sandbox.network.egress[0].cidr") {
		t.Fatalf("creating an Execution with egress CIDR not-a-cidr: %v; want it refused naming the field", err)
	}

	exec := fixtures.Execution(ns, "run-bad")
	exec.Spec.Input = runtime.RawExtension{Raw: []byte(`{"command":"sleep 300","runInBackground":true}`)}
	createExecution(t, exec)

	done := waitForPhase(t, ns, "run-bad", toolgatev1alpha1.ExecutionFailed)
	if c := completeCondition(t, done); c.Reason != toolgatev1alpha1.ReasonJobInvalid || !strings.Contains(c.Message, "spec.input.runInBackground") {
		t.Errorf("Complete = %+v, want JobInvalid naming the field", c)
	}
	if jobs := listJobs(t, ns); len(jobs) != 0 {
		t.Errorf("an invalid Execution got %d Jobs", len(jobs))
	}
}
