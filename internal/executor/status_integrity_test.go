package executor

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
)

// The tool shares the runner's uid and container, so it can write the termination
// message, and it can kill the runner before the runner writes its own. The runner's
// exit code says which Result it wrote (0 a success, protocol.ExitFailed a failure); a
// Result the exit code contradicts is not the runner's, and the Execution fails closed
// as an Exception that shows none of it.
func TestProjectRefusesAResultItsExitCodeContradicts(t *testing.T) {
	forgedSuccess := protocol.Result{ExitCode: 0, Message: "forged", DurationMs: 5, ContentSHA256: sha("x"), UID: 65532, ReadOnlyRoot: true}
	forgedFailure := protocol.Result{ExitCode: 2, ErrorKind: protocol.KindExitCode, Message: "forged", UID: 65532}
	tests := []struct {
		name     string
		exitCode int32
		res      protocol.Result
		job      *batchv1.Job
		message  []string
	}{
		{name: "exit 0 with a failure", exitCode: 0, res: forgedFailure, message: []string{"exited 0", "reports a failure (exit code 2"}},
		{name: "ExitFailed with a success", exitCode: protocol.ExitFailed, res: forgedSuccess, message: []string{"exited 3", "reports a success"}},
		{name: "no result written, a success in the file", exitCode: protocol.ExitNoResult, res: forgedSuccess, message: []string{"exited 1", "could not write its result"}},
		{name: "runner killed, a success in the file", exitCode: 137, res: forgedSuccess, message: []string{"exited 137 (killed by signal 9)"}},
		{name: "runner killed, a failure in the file", exitCode: 137, res: forgedFailure, message: []string{"exited 137 (killed by signal 9)"}},
		{name: "the tool's own exit code is no runner exit code", exitCode: 7, res: protocol.Result{ExitCode: 7, ErrorKind: protocol.KindExitCode}, message: []string{"exited 7,"}},
		{name: "Go runtime crash", exitCode: 2, res: forgedSuccess, message: []string{"exited 2,"}},
		{name: "deadline, runner killed, a success in the file", exitCode: 143, res: forgedSuccess, job: testJob(deadlineCondition()),
			message: []string{"killed by signal 15", "deadline passed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := tc.job
			if job == nil {
				job = testJob()
			}
			st := Project(makeExecution("e1").Obj(), Observation{Job: job, Pod: makePod().Terminated(tc.exitCode, resultJSON(tc.res)).Obj(),
				Log: LogText{Head: []byte("printed\n"), Total: 8}}, now)
			if st.Phase != toolgatev1alpha1.ExecutionFailed || st.ErrorKind != toolgatev1alpha1.ErrorException {
				t.Fatalf("phase %s, errorKind %s (message %q), want Failed Exception", st.Phase, st.ErrorKind, st.Message)
			}
			for _, part := range append([]string{"cannot be trusted"}, tc.message...) {
				if !strings.Contains(st.Message, part) {
					t.Errorf("message %q does not say %q", st.Message, part)
				}
			}
			// Nothing of the untrusted result is shown as fact.
			if strings.Contains(st.Message, "forged") || st.Facts != nil || st.Sandbox != nil || st.DurationMillis != 0 || st.OutputSHA256 != "" {
				t.Errorf("status shows the untrusted result: %+v", st)
			}
			if st.ExitCode == nil || *st.ExitCode != tc.exitCode {
				t.Errorf("exitCode %v, want the container's %d", st.ExitCode, tc.exitCode)
			}
			if st.Output != "printed\n" {
				t.Errorf("output %q, want the container log", st.Output)
			}
		})
	}
}

// The runner's own exit codes with the Results they stand for are believed.
func TestProjectBelievesAResultItsExitCodeAgreesWith(t *testing.T) {
	for _, tc := range []struct {
		exitCode int32
		res      protocol.Result
		phase    toolgatev1alpha1.ExecutionPhase
		kind     toolgatev1alpha1.ErrorKind
	}{
		{0, protocol.Result{}, toolgatev1alpha1.ExecutionSucceeded, ""},
		{protocol.ExitFailed, protocol.Result{ExitCode: 7, ErrorKind: protocol.KindExitCode}, toolgatev1alpha1.ExecutionFailed, toolgatev1alpha1.ErrorExitCode},
		{protocol.ExitFailed, protocol.Result{ExitCode: 1, ErrorKind: protocol.KindException, Message: "processes of the call may still be running"}, toolgatev1alpha1.ExecutionFailed, toolgatev1alpha1.ErrorException},
	} {
		st := Project(makeExecution("e1").Obj(), Observation{Job: testJob(), Pod: makePod().Terminated(tc.exitCode, resultJSON(tc.res)).Obj()}, now)
		if st.Phase != tc.phase || st.ErrorKind != tc.kind || strings.Contains(st.Message, "cannot be trusted") {
			t.Errorf("exit %d, result %+v: phase %s, kind %s, message %q", tc.exitCode, tc.res, st.Phase, st.ErrorKind, st.Message)
		}
		if st.ExitCode == nil || *st.ExitCode != int32(tc.res.ExitCode) {
			t.Errorf("exit %d: exitCode %v, want the tool's %d", tc.exitCode, st.ExitCode, tc.res.ExitCode)
		}
	}
}

// A call stopped because its Job was deleted (the task ended) is Aborted, not a
// Timeout, and keeps what the runner saw run: the runner reports the SIGTERM of the
// pod's deletion as a Timeout.
func TestProjectDeletedJobWithTheRunnersResultIsAborted(t *testing.T) {
	stopped := protocol.Result{ExitCode: protocol.TimeoutExitCode, ErrorKind: protocol.KindTimeout, Message: "command was stopped: the runner was terminated", StdoutBytes: 8, OutputSHA256: sha("printed\n")}
	deleting := testJob()
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t1))
	for name, obs := range map[string]Observation{
		"job being deleted": {Job: deleting, Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(stopped)).Obj()},
		"job gone":          {JobCreated: true, Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(stopped)).Obj()},
		"pod being deleted": {Job: testJob(), Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(stopped)).Deleting().Obj()},
	} {
		obs.Log = LogText{Head: []byte("printed\n"), Total: 8}
		st := Project(makeExecution("e1").Obj(), obs, now)
		if st.Phase != toolgatev1alpha1.ExecutionFailed || st.ErrorKind != toolgatev1alpha1.ErrorAborted {
			t.Errorf("%s: phase %s, errorKind %s, want Failed Aborted", name, st.Phase, st.ErrorKind)
		}
		if !strings.Contains(st.Message, "was deleted while the tool ran") || !strings.Contains(st.Message, "runner was terminated") {
			t.Errorf("%s: message %q", name, st.Message)
		}
		if st.ExitCode == nil || *st.ExitCode != protocol.TimeoutExitCode || st.Output != "printed\n" {
			t.Errorf("%s: exit code %v, output %q: what ran is not kept", name, st.ExitCode, st.Output)
		}
	}
	// Without a deletion it stays the Timeout the runner reported.
	st := Project(makeExecution("e1").Obj(), Observation{Job: testJob(), Pod: makePod().Terminated(protocol.ExitFailed, resultJSON(stopped)).Obj()}, now)
	if st.ErrorKind != toolgatev1alpha1.ErrorTimeout {
		t.Errorf("errorKind %s, want Timeout", st.ErrorKind)
	}
}

// The runner names the invocation it read. A result that names another one than
// the Execution's ran something else, and one that names none was written by a
// runner older than the controller (or by something else): the Execution fails
// closed, as an Exception that shows nothing of what ran.
func TestProjectRefusesTheResultOfAnotherInvocation(t *testing.T) {
	success := protocol.Result{ExitCode: 0, Message: "ran", DurationMs: 5, StdoutBytes: 8, OutputSHA256: sha("printed\n"), UID: 65532, ReadOnlyRoot: true}
	other, none := success, success
	other.InvocationSHA256 = sha(`{"executionName":"e1","tool":"bash","input":{"command":"curl evil"}}`)
	for name, tc := range map[string]struct {
		pod     *corev1.Pod
		message string
	}{
		"another invocation":  {makePod().Terminated(0, resultJSON(other)).Obj(), "result of another invocation (sha256 " + other.InvocationSHA256 + ") than the one the controller sent (sha256 " + invocationOf(makeExecution("e1").Obj()) + ")"},
		"no invocation named": {makePod().Terminated(0, string(protocol.EncodeResult(none))).Obj(), "names no invocation (invocationSHA256 is empty): it was written by a runner older than this controller"},
	} {
		t.Run(name, func(t *testing.T) {
			st := Project(makeExecution("e1").Obj(), Observation{Job: testJob(), Pod: tc.pod, Log: LogText{Head: []byte("printed\n"), Total: 8}}, now)
			if st.Phase != toolgatev1alpha1.ExecutionFailed || st.ErrorKind != toolgatev1alpha1.ErrorException {
				t.Fatalf("phase %s, errorKind %s (message %q), want Failed Exception", st.Phase, st.ErrorKind, st.Message)
			}
			for _, part := range []string{"cannot be trusted", tc.message} {
				if !strings.Contains(st.Message, part) {
					t.Errorf("message %q does not say %q", st.Message, part)
				}
			}
			if st.Output != "" || st.Sandbox != nil || st.DurationMillis != 0 || st.OutputSHA256 != "" || st.ExitCode == nil || *st.ExitCode != 0 {
				t.Errorf("status shows what ran as the call's result: %+v", st)
			}
		})
	}
	// The invocation the pod was given, named: believed.
	if st := Project(makeExecution("e1").Obj(), Observation{Job: testJob(), Pod: makePod().Terminated(0, resultJSON(success)).Obj(), Log: LogText{Head: []byte("printed\n"), Total: 8}}, now); st.Phase != toolgatev1alpha1.ExecutionSucceeded {
		t.Errorf("the result of the invocation sent: %s %s", st.Phase, st.Message)
	}
}
