package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
)

var (
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t1  = t0.Add(2 * time.Second)
	now = t0.Add(5 * time.Second)
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// invocationOf is the hash the runner names in its result for exec's invocation.
func invocationOf(exec *toolgatev1alpha1.Execution) string {
	invocation, err := EncodeInvocation(exec)
	if err != nil {
		panic(err)
	}
	return protocol.HashInvocation(invocation)
}

// resultJSON is r as the runner of makeExecution("e1") writes it, unless r names
// another invocation.
func resultJSON(r protocol.Result) string {
	if r.InvocationSHA256 == "" {
		r.InvocationSHA256 = invocationOf(makeExecution("e1").Obj())
	}
	return string(protocol.EncodeResult(r))
}

func testJob(conds ...batchv1.JobCondition) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "team-a"},
		Spec:       batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To[int64](90)},
		Status:     batchv1.JobStatus{Conditions: conds},
	}
}

func deadlineCondition() batchv1.JobCondition {
	return batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, Message: "Job was active longer than specified deadline"}
}

// podBuilder builds the Job's pod as the kubelet would report it.
type podBuilder struct{ pod corev1.Pod }

func makePod() *podBuilder {
	return &podBuilder{pod: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "e1-abcde", Namespace: "team-a"},
		Status: corev1.PodStatus{
			Phase:                 corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: InstallContainerName}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: ToolContainerName}},
		},
	}}
}

func (b *podBuilder) Terminated(exitCode int32, message string) *podBuilder {
	b.pod.Status.Phase = corev1.PodSucceeded
	if exitCode != 0 {
		b.pod.Status.Phase = corev1.PodFailed
	}
	b.pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: exitCode, Message: message, StartedAt: metav1.NewTime(t0), FinishedAt: metav1.NewTime(t1),
	}}
	return b
}
func (b *podBuilder) Running() *podBuilder {
	b.pod.Status.Phase = corev1.PodRunning
	b.pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}
	return b
}
func (b *podBuilder) Waiting(reason, message string) *podBuilder {
	b.pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
	return b
}
func (b *podBuilder) InstallFailed(exitCode int32, message string) *podBuilder {
	b.pod.Status.Phase = corev1.PodFailed
	b.pod.Status.InitContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, Reason: "Error", Message: message}}
	return b
}
func (b *podBuilder) Deleting() *podBuilder {
	b.pod.DeletionTimestamp = ptr.To(metav1.NewTime(t1))
	return b
}
func (b *podBuilder) Obj() *corev1.Pod { return b.pod.DeepCopy() }

func TestProject(t *testing.T) {
	const out = "hello world\n"
	okResult := protocol.Result{ExitCode: 0, DurationMs: 1234, StdoutBytes: 12, OutputSHA256: sha(out),
		ArtifactPath: ".toolgate/executions/e1/output.log", ContentSHA256: sha("file"), UID: 65532, ReadOnlyRoot: true}
	bigOut := strings.Repeat("a", 700) + strings.Repeat("z", 700)

	type want struct {
		phase      toolgatev1alpha1.ExecutionPhase
		errorKind  toolgatev1alpha1.ErrorKind
		reason     string
		complete   metav1.ConditionStatus
		exitCode   *int32
		message    string // substring; "" means the message must be empty
		output     string // exact, unless outputHas is set
		outputHas  []string
		truncated  bool
		jobName    string
		podName    string
		facts      *toolgatev1alpha1.ToolFacts
		durationMs int64
	}
	tests := []struct {
		name string
		exec *toolgatev1alpha1.Execution
		obs  Observation
		want want
	}{
		{
			name: "success: exit 0, log verified",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(okResult)).Obj(), Log: LogText{Head: []byte(out), Total: 12}},
			want: want{phase: toolgatev1alpha1.ExecutionSucceeded, reason: toolgatev1alpha1.ReasonJobSucceeded, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](0), output: out, jobName: "e1", podName: "e1-abcde",
				facts: &toolgatev1alpha1.ToolFacts{ContentSHA256: sha("file")}, durationMs: 1234},
		},
		{
			name: "success, but the log read does not match the runner's hash",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(okResult)).Obj(), Log: LogText{Head: []byte("hello wor"), Total: 12}},
			want: want{phase: toolgatev1alpha1.ExecutionSucceeded, reason: toolgatev1alpha1.ReasonJobSucceeded, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](0), output: "hello wor", message: "does not match the runner's output", jobName: "e1", podName: "e1-abcde",
				facts: &toolgatev1alpha1.ToolFacts{ContentSHA256: sha("file")}, durationMs: 1234},
		},
		{
			name: "success, but the log could not be read",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(okResult)).Obj(), Log: LogText{Total: 12, Err: "the container log could not be read: pods \"e1-abcde\" not found"}},
			want: want{phase: toolgatev1alpha1.ExecutionSucceeded, reason: toolgatev1alpha1.ReasonJobSucceeded, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](0), message: "could not be read", jobName: "e1", podName: "e1-abcde",
				facts: &toolgatev1alpha1.ToolFacts{ContentSHA256: sha("file")}, durationMs: 1234},
		},
		{
			name: "non-zero exit",
			obs: Observation{Job: testJob(), Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(protocol.Result{ExitCode: 2, ErrorKind: protocol.KindExitCode, StderrBytes: 6, OutputSHA256: sha("boom!\n"), DurationMs: 10})).Obj(),
				Log: LogText{Head: []byte("boom!\n"), Total: 6}},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorExitCode, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](2), output: "boom!\n", jobName: "e1", podName: "e1-abcde", durationMs: 10},
		},
		{
			name: "non-zero exit without an error kind is ExitCode",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(protocol.Result{ExitCode: 1})).Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorExitCode, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](1), jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "stale edit",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(protocol.Result{ExitCode: 1, ErrorKind: protocol.KindStale, Message: "main.go changed since it was read"})).Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorStale, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](1), message: "main.go changed since it was read", jobName: "e1", podName: "e1-abcde"},
		},
		{
			// The runner's message is the tool's or a remote's words; a viewer of
			// the Execution, its events and the observation read it masked.
			name: "a secret in the runner's message is masked",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(protocol.Result{ExitCode: 1, ErrorKind: protocol.KindStale, Message: "fetch https://bob:pa55word@git.example.com/r.git: key AKIALALEMEL33243OLIB refused"})).Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorStale, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](1), message: "fetch https://bob:[MASKED]@git.example.com/r.git: key [MASKED] refused", jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "runner killed the tool at its timeout",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(protocol.Result{ExitCode: 137, ErrorKind: protocol.KindTimeout, Message: "killed after 30s"})).Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorTimeout, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](137), message: "killed after 30s", jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "unknown error kind is an Exception",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(protocol.Result{ExitCode: 1, ErrorKind: "Cosmic"})).Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorException, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](1), message: `unknown error kind "Cosmic"`, jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "deadline exceeded, pod killed without a result",
			obs:  Observation{Job: testJob(deadlineCondition()), Pod: makePod().Terminated(137, "").Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorTimeout, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](137), message: "deadline passed", jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "deadline exceeded, pod already gone",
			obs:  Observation{Job: testJob(deadlineCondition())},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorTimeout, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				message: "deadline of 90s passed", jobName: "e1"},
		},
		{
			name: "deadline exceeded even though the runner reported success is a Timeout",
			obs:  Observation{Job: testJob(deadlineCondition()), Pod: makePod().Terminated(0, resultJSON(protocol.Result{ExitCode: 0})).Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorTimeout, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](0), message: "deadline passed", jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "missing termination message is a plain error, never a success",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(0, "").Obj(), Log: LogText{Head: []byte("something"), Total: -1}},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorException, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](0), message: "the runner left no result in the termination message (container exit code 0)", output: "something",
				jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "unparsable termination message is a plain error",
			obs:  Observation{Job: testJob(), Pod: makePod().Terminated(0, "panic: runtime error").Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorException, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](0), message: "is not the runner's JSON result", jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "Job deleted before it finished",
			obs:  Observation{JobCreated: true},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorAborted, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				message: "was deleted before the tool finished", jobName: "e1"},
		},
		{
			name: "Job being deleted",
			obs: Observation{Job: func() *batchv1.Job {
				j := testJob()
				j.DeletionTimestamp = ptr.To(metav1.NewTime(t1))
				return j
			}(), Pod: makePod().Running().Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorAborted, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				message: "is being deleted", jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "pod being deleted",
			obs:  Observation{Job: testJob(), Pod: makePod().Running().Deleting().Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorAborted, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				message: "pod e1-abcde is being deleted", jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "Job failed and its pod is gone",
			obs:  Observation{Job: testJob(batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"})},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorAborted, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				message: "BackoffLimitExceeded", jobName: "e1"},
		},
		{
			name: "runner install failed: nothing ran",
			obs:  Observation{Job: testJob(), Pod: makePod().InstallFailed(1, "exec format error").Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorException, reason: toolgatev1alpha1.ReasonJobFailed, complete: metav1.ConditionTrue,
				message: "not run: the init container install-runner that installs the runner failed (exit code 1, reason Error): exec format error", jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "running",
			obs:  Observation{Job: testJob(), Pod: makePod().Running().Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionRunning, reason: toolgatev1alpha1.ReasonJobRunning, complete: metav1.ConditionFalse,
				jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "pending on an image pull",
			obs:  Observation{Job: testJob(), Pod: makePod().Waiting("ImagePullBackOff", "Back-off pulling image").Obj()},
			want: want{phase: toolgatev1alpha1.ExecutionPending, reason: toolgatev1alpha1.ReasonJobPending, complete: metav1.ConditionFalse,
				message: "container tool is waiting: ImagePullBackOff Back-off pulling image", jobName: "e1", podName: "e1-abcde"},
		},
		{
			name: "Job created, no pod yet",
			obs:  Observation{Job: testJob()},
			want: want{phase: toolgatev1alpha1.ExecutionPending, reason: toolgatev1alpha1.ReasonJobPending, complete: metav1.ConditionFalse,
				message: "waiting for the Job's pod", jobName: "e1"},
		},
		{
			name: "invalid Execution: nothing ran",
			obs:  Observation{BuildError: errors.New("spec.sandbox.image is empty")},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorException, reason: toolgatev1alpha1.ReasonJobInvalid, complete: metav1.ConditionTrue,
				message: "not run: spec.sandbox.image is empty"},
		},
		{
			name: "not run for a reason of its own",
			obs:  Observation{BuildError: fmt.Errorf("checking the walls: %w", reasonedError{reason: toolgatev1alpha1.ReasonWallsWidened, msg: "NetworkPolicy allow-all opens them"})},
			want: want{phase: toolgatev1alpha1.ExecutionFailed, errorKind: toolgatev1alpha1.ErrorException, reason: toolgatev1alpha1.ReasonWallsWidened, complete: metav1.ConditionTrue,
				message: "not run: checking the walls: NetworkPolicy allow-all opens them"},
		},
		{
			name: "output larger than the cap: head and tail, cut marked",
			exec: makeExecution("e1").MaxOutput(256).Obj(),
			obs: Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(protocol.Result{ExitCode: 0, StdoutBytes: 1400, OutputSHA256: sha(bigOut), Truncated: true,
				InvocationSHA256: invocationOf(makeExecution("e1").MaxOutput(256).Obj())})).Obj(),
				Log: LogText{Head: []byte(bigOut[:96]), Tail: []byte(bigOut[1400-96:]), Total: 1400}},
			want: want{phase: toolgatev1alpha1.ExecutionSucceeded, reason: toolgatev1alpha1.ReasonJobSucceeded, complete: metav1.ConditionTrue,
				exitCode: ptr.To[int32](0), outputHas: []string{strings.Repeat("a", 96) + "\n…[toolgate: 1208 of 1400 bytes omitted]…\n" + strings.Repeat("z", 96)},
				truncated: true, jobName: "e1", podName: "e1-abcde"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec := tt.exec
			if exec == nil {
				exec = makeExecution("e1").Obj()
			}
			st := Project(exec, tt.obs, now)
			w := tt.want
			got := want{phase: st.Phase, errorKind: st.ErrorKind, exitCode: st.ExitCode, output: st.Output, truncated: st.Truncated,
				jobName: st.JobName, podName: st.PodName, facts: st.Facts, durationMs: st.DurationMillis}
			cond := meta.FindStatusCondition(st.Conditions, toolgatev1alpha1.ConditionComplete)
			if cond == nil {
				t.Fatal("no Complete condition")
			}
			got.reason, got.complete = cond.Reason, cond.Status
			if w.outputHas != nil {
				for _, s := range w.outputHas {
					if !strings.Contains(st.Output, s) {
						t.Errorf("output %q does not contain %q", st.Output, s)
					}
				}
				if len(st.Output) > int(exec.Spec.MaxOutputBytes) {
					t.Errorf("output is %d bytes, more than maxOutputBytes %d", len(st.Output), exec.Spec.MaxOutputBytes)
				}
				w.output, w.outputHas = st.Output, nil
			}
			if w.message == "" && st.Message != "" {
				t.Errorf("message = %q, want none", st.Message)
			}
			if !strings.Contains(st.Message, w.message) {
				t.Errorf("message = %q, want it to contain %q", st.Message, w.message)
			}
			if cond.Message == "" || (st.Message != "" && cond.Message != st.Message) {
				t.Errorf("condition message = %q, want the status message %q (or a default)", cond.Message, st.Message)
			}
			w.message = ""
			if diff := cmp.Diff(w, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if cond.ObservedGeneration != exec.Generation {
				t.Errorf("condition observedGeneration = %d, want %d", cond.ObservedGeneration, exec.Generation)
			}
			if st.Phase == toolgatev1alpha1.ExecutionSucceeded && st.ErrorKind != "" {
				t.Errorf("a success carries errorKind %q", st.ErrorKind)
			}
		})
	}
}

// reasonedError is a BuildError with a condition reason of its own.
type reasonedError struct{ reason, msg string }

func (e reasonedError) Error() string           { return e.msg }
func (e reasonedError) ConditionReason() string { return e.reason }

func TestProjectSuccessFields(t *testing.T) {
	out := "ok\n"
	res := protocol.Result{ExitCode: 0, DurationMs: 61500, StdoutBytes: 2, StderrBytes: 1, OutputSHA256: sha(out),
		ArtifactPath: ".toolgate/executions/e1/output.log", LinesAdded: 3, LinesRemoved: 1, UID: 65532, ReadOnlyRoot: true}
	st := Project(makeExecution("e1").Obj(), Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(res)).Obj(), Log: LogText{Head: []byte(out), Total: 3}}, now)
	want := toolgatev1alpha1.ExecutionStatus{
		Phase: toolgatev1alpha1.ExecutionSucceeded, JobName: "e1", PodName: "e1-abcde",
		StartTime: ptr.To(metav1.NewTime(t0)), CompletionTime: ptr.To(metav1.NewTime(t1)),
		ExitCode: ptr.To[int32](0), DurationMillis: 61500,
		StdoutBytes: 2, StderrBytes: 1, OutputSHA256: sha(out), Output: out,
		ArtifactPath: ".toolgate/executions/e1/output.log",
		Facts:        &toolgatev1alpha1.ToolFacts{LinesAdded: 3, LinesRemoved: 1},
		Sandbox:      &toolgatev1alpha1.ObservedSandbox{UID: 65532, ReadOnlyRootFilesystem: true},
	}
	st.Conditions = nil
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestProjectKeepsTransitionTime(t *testing.T) {
	exec := makeExecution("e1").Obj()
	running := Observation{Job: testJob(), Pod: makePod().Running().Obj()}
	exec.Status = Project(exec, running, t0)
	again := Project(exec, running, now)
	if c := meta.FindStatusCondition(again.Conditions, toolgatev1alpha1.ConditionComplete); !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("an unchanged condition moved its transition time to %v", c.LastTransitionTime)
	}
	exec.Status = again
	done := Project(exec, Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(protocol.Result{})).Obj()}, now)
	if c := meta.FindStatusCondition(done.Conditions, toolgatev1alpha1.ConditionComplete); !c.LastTransitionTime.Time.Equal(now) || c.Status != metav1.ConditionTrue {
		t.Errorf("a flipped condition = %+v, want True at %v", c, now)
	}
	if !IsFinished(&done) || IsFinished(&again) {
		t.Errorf("IsFinished: done=%v running=%v", IsFinished(&done), IsFinished(&again))
	}
}

func TestParseResultRejectsTrailingData(t *testing.T) {
	_, err := ParseResult(&corev1.ContainerStateTerminated{Message: `{"exitCode":0} {"exitCode":1}`})
	if err == nil {
		t.Fatal("two JSON objects were accepted as one result")
	}
}

func TestTruncateMessage(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6000 bytes
	got := truncateMessage(long)
	if len(got) > maxMessageBytes || !strings.HasSuffix(got, "[message cut]") || !strings.HasPrefix(got, "é") {
		t.Errorf("truncateMessage: %d bytes, suffix %q", len(got), got[len(got)-20:])
	}
	if strings.ContainsRune(got, '\uFFFD') {
		t.Error("truncateMessage cut inside a rune")
	}
}

// HoldsWholeResult is read off what Project makes of real observations: only a
// trusted result whose whole output is in the status lets the Job go.
func TestHoldsWholeResult(t *testing.T) {
	const out = "hello world\n"
	ok := protocol.Result{ExitCode: 0, StdoutBytes: 12, OutputSHA256: sha(out), UID: 65532, ReadOnlyRoot: true}
	failed := protocol.Result{ExitCode: 3, StdoutBytes: 12, OutputSHA256: sha(out), UID: 65532}
	secret := "token=s3cr3tvalue123456\n"
	masked := protocol.Result{ExitCode: 0, StdoutBytes: int64(len(secret)), OutputSHA256: sha(secret), UID: 65532}
	big := strings.Repeat("x", 2000)
	truncated := protocol.Result{ExitCode: 0, StdoutBytes: 2000, OutputSHA256: sha(big), Truncated: true, UID: 65532}
	whole := func(res protocol.Result, text string) Observation {
		return Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(res)).Obj(), Log: LogText{Head: []byte(text), Total: int64(len(text))}}
	}
	for name, tc := range map[string]struct {
		obs  Observation
		want bool
	}{
		"success, the whole output read":           {whole(ok, out), true},
		"a failing tool, the whole output read":    {Observation{Job: testJob(), Pod: makePod().Terminated(int32(protocol.ProcessExitCode(failed)), resultJSON(failed)).Obj(), Log: LogText{Head: []byte(out), Total: 12}}, true},
		"the log could not be read":                {Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(ok)).Obj(), Log: LogText{Err: "the log could not be read: boom", Total: 12}}, false},
		"the log does not match the runner's hash": {whole(ok, "hello wor"), false},
		"the output was masked":                    {whole(masked, secret), false},
		"the output was truncated":                 {Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(truncated)).Obj(), Log: LogText{Head: []byte(big[:1000]), Tail: []byte(big[1000:]), Total: 2000}}, false},
		"no result from the runner":                {Observation{Job: testJob(), Pod: makePod().Terminated(0, "not json").Obj(), Log: LogText{Head: []byte(out), Total: 12}}, false},
		"a forged result (exit code contradicts)":  {Observation{Job: testJob(), Pod: makePod().Terminated(7, resultJSON(ok)).Obj(), Log: LogText{Head: []byte(out), Total: 12}}, false},
		"still running":                            {Observation{Job: testJob(), Pod: makePod().Running().Obj()}, false},
	} {
		st := Project(makeExecution("e1").Obj(), tc.obs, now)
		if got := HoldsWholeResult(&st); got != tc.want {
			t.Errorf("%s: HoldsWholeResult = %v, want %v (status %+v)", name, got, tc.want, st)
		}
		if FinishedAt(&st).IsZero() == IsFinished(&st) {
			t.Errorf("%s: FinishedAt disagrees with IsFinished", name)
		}
	}
}
