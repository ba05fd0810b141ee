package controller

import (
	"errors"
	"testing"

	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/runner"
)

// A session takes no call after one that did not end clean; a call that never
// started leaves it as it was; a background job's session was its own.
func TestRetireAfter(t *testing.T) {
	sent := runner.HashInvocation([]byte(`{"executionName":"c"}`))
	// result is r as the runner of the invocation sent writes it.
	result := func(r runner.Result) []byte {
		if r.InvocationSHA256 == "" {
			r.InvocationSHA256 = sent
		}
		return runner.EncodeResult(r)
	}
	cases := []struct {
		name   string
		run    executor.SessionRun
		job    bool
		retire bool
	}{
		{"clean success", executor.SessionRun{ExitCode: runner.ExitSucceeded, Result: result(runner.Result{})}, false, false},
		{"clean failure of the tool", executor.SessionRun{ExitCode: runner.ExitFailed, Result: result(runner.Result{ExitCode: 2, ErrorKind: runner.KindExitCode})}, false, false},
		{"the runner could not clean up", executor.SessionRun{ExitCode: runner.ExitFailed, Result: result(runner.Result{ExitCode: 1, ErrorKind: runner.KindException, Unclean: true})}, false, true},
		{"the stream broke", executor.SessionRun{Err: errors.New("connection reset")}, false, true},
		{"the runner was killed", executor.SessionRun{ExitCode: 137}, false, true},
		{"no readable result", executor.SessionRun{ExitCode: runner.ExitSucceeded, Result: []byte("not json")}, false, true},
		{"the result of another invocation", executor.SessionRun{ExitCode: runner.ExitSucceeded, Result: result(runner.Result{InvocationSHA256: runner.HashInvocation([]byte("forged"))})}, false, true},
		{"a result that names no invocation", executor.SessionRun{ExitCode: runner.ExitSucceeded, Result: runner.EncodeResult(runner.Result{})}, false, true},
		{"never started", executor.SessionRun{NotRun: "the pod was replaced", Err: errors.New("x")}, false, false},
		{"a job that ended clean", executor.SessionRun{ExitCode: runner.ExitSucceeded, Result: result(runner.Result{})}, true, true},
		{"a job that never started", executor.SessionRun{NotRun: "stopped"}, true, true},
	}
	for _, tc := range cases {
		tc.run.InvocationSHA256 = sent
		if got := retireAfter(&tc.run, tc.job) != ""; got != tc.retire {
			t.Errorf("%s: retire %v, want %v", tc.name, got, tc.retire)
		}
	}
}
