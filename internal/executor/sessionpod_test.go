package executor

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
)

func TestSessionNameIsTheTasksAndTheProfiles(t *testing.T) {
	exec := makeExecution("c").Obj()
	exec.Spec.Sandbox.Isolation = toolgatev1alpha1.IsolationSession
	name := ExecutionSession(exec)
	if !strings.HasPrefix(name, SessionPrefix) || len(name) > 63 {
		t.Fatalf("session name %q", name)
	}
	other := exec.DeepCopy()
	other.Name = "another-call"
	other.Spec.IntentRef.Name = "another-intent"
	if ExecutionSession(other) != name {
		t.Errorf("two calls of one task and profile get two sessions")
	}
	for what, change := range map[string]func(*toolgatev1alpha1.Execution){
		"task":      func(e *toolgatev1alpha1.Execution) { e.Spec.TaskRef.Name = "other-task" },
		"read-only": func(e *toolgatev1alpha1.Execution) { e.Spec.Sandbox.ReadOnlyWorkspace = true },
		"image":     func(e *toolgatev1alpha1.Execution) { e.Spec.Sandbox.Image = "example.test/other:v1" },
		"network": func(e *toolgatev1alpha1.Execution) {
			e.Spec.Sandbox.Network = toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}}}
		},
	} {
		changed := exec.DeepCopy()
		change(changed)
		if ExecutionSession(changed) == name {
			t.Errorf("a call with another %s runs in the same session", what)
		}
	}
	// A background job gets a session of its own: nothing else runs beside it.
	job := exec.DeepCopy()
	job.Spec.Tool = toolgatev1alpha1.ToolBash
	job.Spec.Input.Raw = []byte(`{"command":"make serve","runInBackground":true}`)
	second := job.DeepCopy()
	second.Name = "another-job"
	if ExecutionSession(job) == name || ExecutionSession(job) == ExecutionSession(second) || !strings.HasPrefix(ExecutionSession(job), SessionPrefix) {
		t.Errorf("background jobs share a session: %s, %s, the task's %s", ExecutionSession(job), ExecutionSession(second), name)
	}
}

// A session pod has exactly the walls of the Job's pod for the same profile; only
// its command, the invocation's environment and the grace period differ.
func TestSessionPodHasTheWallsOfAJob(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		b := makeExecution("c").Network(toolgatev1alpha1.NetworkSpec{Mode: toolgatev1alpha1.NetworkAllowList, Egress: []toolgatev1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}}})
		if readOnly {
			b = b.ReadOnly()
		}
		exec := b.Obj()
		job, err := BuildJob(exec, "example.test/runner:v1")
		if err != nil {
			t.Fatal(err)
		}
		pod, err := BuildSessionPod(exec.Namespace, ExecutionSessionOf(exec), "example.test/runner:v1")
		if err != nil {
			t.Fatal(err)
		}
		want := job.Spec.Template.Spec.DeepCopy()
		want.Containers[0].Command = []string{RunnerPath, protocol.SessionCommand}
		want.Containers[0].Env = wallProbeEnv() // the Job's, without the invocation
		grace := int64(SessionGraceSeconds)
		want.TerminationGracePeriodSeconds = &grace
		if !equality.Semantic.DeepEqual(&pod.Spec, want) {
			t.Errorf("read-only %v: the session pod's spec is not the Job's pod's:\n got %+v\nwant %+v", readOnly, pod.Spec, *want)
		}
		if pod.Labels[toolgatev1alpha1.LabelNetwork] != NetworkKey(exec) || pod.Labels[toolgatev1alpha1.LabelSession] != ExecutionSessionOf(exec).Key() {
			t.Errorf("labels %v", pod.Labels)
		}
		if pod.Name != ExecutionSession(exec) {
			t.Errorf("pod %s, the call looks for %s", pod.Name, ExecutionSession(exec))
		}
	}
	if _, err := BuildSessionPod("ns", TaskSession("t", toolgatev1alpha1.SandboxProfile{Image: "i", WorkspaceClaimName: "w"}), ""); err == nil {
		t.Error("a session without a runner image was built")
	}
}

func TestSessionReadyAndEnded(t *testing.T) {
	pod := func(phase corev1.PodPhase, tool corev1.ContainerState) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Status: corev1.PodStatus{Phase: phase,
			ContainerStatuses: []corev1.ContainerStatus{{Name: ToolContainerName, State: tool}}}}
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}
	if ok, why := SessionReady(pod(corev1.PodRunning, running)); !ok {
		t.Errorf("a running session is not ready: %s", why)
	}
	if ok, why := SessionReady(pod(corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}})); ok || !strings.Contains(why, "is starting") {
		t.Errorf("a pending session: %v %q", ok, why)
	}
	if ended, why := SessionEnded(pod(corev1.PodRunning, exited)); !ended || !strings.Contains(why, "exited 137, reason OOMKilled") {
		t.Errorf("a session whose tool container exited: %v %q", ended, why)
	}
	if ok, _ := SessionReady(pod(corev1.PodRunning, exited)); ok {
		t.Error("a session whose tool container exited is ready")
	}
	deleting := pod(corev1.PodRunning, running)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if ok, _ := SessionReady(deleting); ok {
		t.Error("a session being deleted is ready")
	}
}

func TestProjectSession(t *testing.T) {
	exec := makeExecution("c").MaxOutput(300).Obj()
	started := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	finished := started.Add(1500 * time.Millisecond)
	const invocation = `{"executionName":"c","tool":"bash","input":{"command":"echo hello"},"timeoutSeconds":30,"maxOutputBytes":300}`
	hash := protocol.HashInvocation([]byte(invocation))
	result := func(r protocol.Result) []byte {
		if r.InvocationSHA256 == "" {
			r.InvocationSHA256 = hash
		}
		return protocol.EncodeResult(r)
	}
	small := "hello\n"
	long := strings.Repeat("a", 200) + strings.Repeat("b", 800) + strings.Repeat("c", 200)
	head, tail := Budgets(300)
	sent := long[:head] + long[len(long)-tail:]
	cases := []struct {
		name     string
		session  SessionObservation
		phase    toolgatev1alpha1.ExecutionPhase
		kind     toolgatev1alpha1.ErrorKind
		reason   string
		message  []string
		output   []string
		noOutput bool
		finished bool
	}{
		{name: "waiting", session: SessionObservation{Name: "s", Waiting: "session pod s is starting"},
			phase: toolgatev1alpha1.ExecutionPending, reason: toolgatev1alpha1.ReasonSessionPending, message: []string{"session pod s is starting"}},
		{name: "running", session: SessionObservation{Name: "s", Started: &started},
			phase: toolgatev1alpha1.ExecutionRunning, reason: toolgatev1alpha1.ReasonSessionRunning},
		{name: "lost", session: SessionObservation{Name: "s", Started: &started, Lost: "the controller is gone"},
			phase: toolgatev1alpha1.ExecutionFailed, kind: toolgatev1alpha1.ErrorException, message: []string{"the controller is gone"}, finished: true},
		{name: "stream broke", session: SessionObservation{Name: "s", Started: &started, Run: &SessionRun{FinishedAt: finished, Err: errString("connection reset")}},
			phase: toolgatev1alpha1.ExecutionFailed, kind: toolgatev1alpha1.ErrorException, message: []string{"session pod s", "connection reset", "not run again"}, finished: true},
		{name: "stopped with its task", session: SessionObservation{Name: "s", Started: &started, Stopped: "its AgentTask t ended", Run: &SessionRun{FinishedAt: finished, Err: errString("connection reset")}},
			phase: toolgatev1alpha1.ExecutionFailed, kind: toolgatev1alpha1.ErrorAborted, message: []string{"stopped while the call ran, because its AgentTask t ended"}, finished: true},
		{name: "killed runner", session: SessionObservation{Name: "s", Started: &started, Run: &SessionRun{FinishedAt: finished, ExitCode: 137, Output: []byte("partial")}},
			phase: toolgatev1alpha1.ExecutionFailed, kind: toolgatev1alpha1.ErrorException, message: []string{"killed by signal 9", "runner in session pod s", "not run again"}, output: []string{"partial"}, finished: true},
		{name: "forged success", session: SessionObservation{Name: "s", Started: &started, Run: &SessionRun{FinishedAt: finished, ExitCode: protocol.ExitFailed,
			Result: result(protocol.Result{ExitCode: 0, OutputSHA256: sha(small), StdoutBytes: int64(len(small))}), Output: []byte(small)}},
			phase: toolgatev1alpha1.ExecutionFailed, kind: toolgatev1alpha1.ErrorException, message: []string{"cannot be trusted"}, finished: true},
		{name: "the result of another invocation", session: SessionObservation{Name: "s", Started: &started, Run: &SessionRun{FinishedAt: finished,
			Result: result(protocol.Result{ExitCode: 0, OutputSHA256: sha(small), StdoutBytes: int64(len(small)), UID: 65532, InvocationSHA256: sha("forged")}), Output: []byte(small)}},
			phase: toolgatev1alpha1.ExecutionFailed, kind: toolgatev1alpha1.ErrorException,
			message: []string{"cannot be trusted", "result of another invocation (sha256 " + sha("forged") + ") than the one the controller sent (sha256 " + hash, "session pod s, which is replaced before the next call"}, noOutput: true, finished: true},
		{name: "a result that names no invocation", session: SessionObservation{Name: "s", Started: &started, Run: &SessionRun{FinishedAt: finished,
			Result: protocol.EncodeResult(protocol.Result{ExitCode: 0, OutputSHA256: sha(small), StdoutBytes: int64(len(small)), UID: 65532}), Output: []byte(small)}},
			phase: toolgatev1alpha1.ExecutionFailed, kind: toolgatev1alpha1.ErrorException, message: []string{"cannot be trusted", "names no invocation", "older than this controller"}, noOutput: true, finished: true},
		{name: "success", session: SessionObservation{Name: "s", Started: &started, Run: &SessionRun{FinishedAt: finished,
			Result: result(protocol.Result{ExitCode: 0, DurationMs: 1200, OutputSHA256: sha(small), StdoutBytes: int64(len(small)), UID: 65532, ReadOnlyRoot: true}), Output: []byte(small)}},
			phase: toolgatev1alpha1.ExecutionSucceeded, reason: toolgatev1alpha1.ReasonJobSucceeded, output: []string{small}, finished: true},
		{name: "output cut by the runner", session: SessionObservation{Name: "s", Started: &started, Run: &SessionRun{FinishedAt: finished, ExitCode: protocol.ExitFailed,
			Result: result(protocol.Result{ExitCode: 1, ErrorKind: protocol.KindExitCode, OutputSHA256: sha(long), StdoutBytes: int64(len(long)), Truncated: true, UID: 65532}), Output: []byte(sent)}},
			phase: toolgatev1alpha1.ExecutionFailed, kind: toolgatev1alpha1.ErrorExitCode,
			output: []string{long[:head], "of 1200 bytes omitted", long[len(long)-tail:]}, finished: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.session
			if s.Run != nil && s.Run.InvocationSHA256 == "" {
				run := *s.Run
				run.InvocationSHA256 = hash // what the controller sent
				s.Run = &run
			}
			st := Project(exec, Observation{Session: &s}, finished)
			if st.Phase != c.phase || st.ErrorKind != c.kind {
				t.Fatalf("phase %s kind %q, want %s %q: %s", st.Phase, st.ErrorKind, c.phase, c.kind, st.Message)
			}
			if c.reason != "" && st.Conditions[0].Reason != c.reason {
				t.Errorf("reason %s, want %s", st.Conditions[0].Reason, c.reason)
			}
			for _, m := range c.message {
				if !strings.Contains(st.Message, m) {
					t.Errorf("message lacks %q: %s", m, st.Message)
				}
			}
			for _, o := range c.output {
				if !strings.Contains(st.Output, o) {
					t.Errorf("output lacks %q: %q", o, st.Output)
				}
			}
			if c.noOutput && (st.Output != "" || st.Sandbox != nil || st.OutputSHA256 != "") {
				t.Errorf("what ran instead of the call is shown as its result: output %q, sandbox %+v", st.Output, st.Sandbox)
			}
			if IsFinished(&st) != c.finished {
				t.Errorf("finished %v", IsFinished(&st))
			}
			if s.Started != nil && st.SessionName != "s" {
				t.Errorf("session name %q", st.SessionName)
			}
			if s.Started == nil && st.SessionName != "" {
				t.Errorf("a call not delivered names session %q", st.SessionName)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }
