package pipeline_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/testenv"
)

// fixedLog is a container log with the pods/log semantics ReadOutput relies on:
// TailLines first, then LimitBytes from the start of what is left.
type fixedLog []byte

func (l fixedLog) ReadLog(_ context.Context, _, _ string, opts corev1.PodLogOptions) ([]byte, error) {
	b := []byte(l)
	if opts.TailLines != nil {
		lines := bytes.SplitAfter(b, []byte("\n"))
		if n := int(*opts.TailLines); n < len(lines) {
			b = bytes.Join(lines[len(lines)-n:], nil)
		}
	}
	if opts.LimitBytes != nil && int64(len(b)) > *opts.LimitBytes {
		b = b[:*opts.LimitBytes]
	}
	return b, nil
}

// TestLargestBinaryOutputIsObserved runs the output of a call at the largest
// maxOutputBytes a task may set through the controller's own code, as bytes no text
// is made of, and writes what it makes to a real API server: the Execution's status
// (the output, masked) and the ToolIntent's observation (the summary for the model).
// Masking writes each control byte and each byte that is not UTF-8 as \xNN, four
// times its size, and JSON (as the API server stores an object) writes '<' as six;
// both writes must be accepted, so that the call is observed, and each must say
// what was cut.
func TestLargestBinaryOutputIsObserved(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	size := int(v1.MaxOutputBytesLimit)
	random := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	for _, tc := range []struct {
		name   string
		output []byte
		// mustCut: the output cannot be shown whole.
		mustCut bool
	}{
		{"random bytes", random, false},
		{"NUL bytes", make([]byte, size), true},
		{"bytes JSON escapes", bytes.Repeat([]byte("<"), size), true},
		// Longer than maxOutputBytes: head and tail, cut by the runner's split.
		{"four times the cap of random bytes", bytes.Repeat(random, 4), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			observeLargeOutput(t, env, tc.output, tc.mustCut)
		})
	}
}

func observeLargeOutput(t *testing.T, env *testenv.Env, output []byte, mustCut bool) {
	ctx := t.Context()
	ns := env.Namespace(t)
	// The rest of the objects as large as a call makes them: the longest command.
	input, err := json.Marshal(map[string]any{"command": strings.Repeat("x", 16384)})
	if err != nil {
		t.Fatal(err)
	}
	intent := &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
		Spec: v1.ToolIntentSpec{
			TaskRef: v1.LocalObjectReference{Name: "t"}, Tool: v1.ToolBash,
			Input: runtime.RawExtension{Raw: input}, RequestedBy: "agent",
		},
	}
	if err := env.Client.Create(ctx, intent); err != nil {
		t.Fatal(err)
	}
	exec := &v1.Execution{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
		Spec: v1.ExecutionSpec{
			IntentRef: v1.LocalObjectReference{Name: intent.Name}, TaskRef: v1.LocalObjectReference{Name: "t"},
			Tool: v1.ToolBash, Input: runtime.RawExtension{Raw: input},
			TimeoutSeconds: 60, MaxOutputBytes: v1.MaxOutputBytesLimit,
			Sandbox: v1.SandboxProfile{Image: "busybox", WorkspaceClaimName: "ws"},
		},
	}
	if err := env.Client.Create(ctx, exec); err != nil {
		t.Fatal(err)
	}
	job, err := executor.BuildJob(exec, "runner:test")
	if err != nil {
		t.Fatal(err)
	}
	pod := testenv.JobPod(job, "-pod")
	sum := sha256.Sum256(output)
	invocation, err := executor.EncodeInvocation(exec)
	if err != nil {
		t.Fatal(err)
	}
	res := protocol.Result{
		ExitCode: 0, StdoutBytes: int64(len(output)), OutputSHA256: hex.EncodeToString(sum[:]),
		Truncated: protocol.Truncated(int64(len(output)), exec.Spec.MaxOutputBytes), InvocationSHA256: protocol.HashInvocation(invocation),
	}
	started := metav1.NewTime(time.Now().Add(-time.Second).Truncate(time.Second))
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: executor.ToolContainerName,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: protocol.ExitSucceeded, Message: string(protocol.EncodeResult(res)), StartedAt: started, FinishedAt: started,
		}},
	}}
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	obs := executor.Observation{
		Job: job, JobCreated: true, Pod: pod,
		Log: executor.ReadOutput(ctx, fixedLog(output), ns, pod.Name, executor.TotalOutputBytes(res), exec.Spec.MaxOutputBytes),
	}

	exec.Status = executor.Project(exec, obs, time.Now())
	if exec.Status.Phase != v1.ExecutionSucceeded {
		t.Fatalf("projected phase %s: %s", exec.Status.Phase, exec.Status.Message)
	}
	if err := env.Client.Status().Update(ctx, exec); err != nil {
		t.Fatalf("the Execution's status write was refused (%d bytes of output): %v", len(exec.Status.Output), err)
	}
	stored := &v1.Execution{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(exec), stored); err != nil {
		t.Fatal(err)
	}
	if !executor.IsFinished(&stored.Status) || stored.Status.Truncated != strings.Contains(stored.Status.Output, "…[toolgate:") {
		t.Fatalf("stored Execution: finished %t, truncated %t, but the cut marked %t", executor.IsFinished(&stored.Status),
			stored.Status.Truncated, strings.Contains(stored.Status.Output, "…[toolgate:"))
	}

	observation := pipeline.FromExecution(stored, time.Now())
	intent.Status.Observation = observation
	if err := env.Client.Status().Update(ctx, intent); err != nil {
		t.Fatalf("the observation's status write was refused (summary of %d bytes): %v", len(observation.Summary), err)
	}
	got := &v1.ToolIntent{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(intent), got); err != nil {
		t.Fatal(err)
	}
	summary := got.Status.Observation.Summary
	if got.Status.Observation.Outcome != v1.OutcomeSucceeded || !got.Status.Observation.Executed {
		t.Fatalf("observation: outcome %s, executed %t", got.Status.Observation.Outcome, got.Status.Observation.Executed)
	}
	if !strings.HasPrefix(summary, "[exit code: 0]\n") {
		t.Fatalf("the summary does not start with the exit code: %.200q", summary)
	}
	cut := got.Status.Observation.Truncated
	if cut != strings.Contains(summary, "[output truncated: ") || (mustCut && !cut) {
		t.Fatalf("the summary (%d bytes, truncated %t) does not say plainly that output was cut: … %.400q", len(summary), cut, summary[max(len(summary)-400, 0):])
	}
}
