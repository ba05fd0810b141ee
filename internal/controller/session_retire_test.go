package controller

import (
	"errors"
	"testing"

	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/protocol"
)

// A session takes no call after one that did not end clean; a call that never
// started leaves it as it was; a background job's session was its own.
func TestRetireAfter(t *testing.T) {
	sent := protocol.HashInvocation([]byte(`{"executionName":"c"}`))
	// result is r as the runner of the invocation sent writes it.
	result := func(r protocol.Result) []byte {
		if r.InvocationSHA256 == "" {
			r.InvocationSHA256 = sent
		}
		return protocol.EncodeResult(r)
	}
	cases := []struct {
		name   string
		run    executor.SessionRun
		job    bool
		retire bool
	}{
		{"clean success", executor.SessionRun{ExitCode: protocol.ExitSucceeded, Result: result(protocol.Result{})}, false, false},
		{"clean failure of the tool", executor.SessionRun{ExitCode: protocol.ExitFailed, Result: result(protocol.Result{ExitCode: 2, ErrorKind: protocol.KindExitCode})}, false, false},
		{"the runner could not clean up", executor.SessionRun{ExitCode: protocol.ExitFailed, Result: result(protocol.Result{ExitCode: 1, ErrorKind: protocol.KindException, Unclean: true})}, false, true},
		{"the stream broke", executor.SessionRun{Err: errors.New("connection reset")}, false, true},
		{"the runner was killed", executor.SessionRun{ExitCode: 137}, false, true},
		{"no readable result", executor.SessionRun{ExitCode: protocol.ExitSucceeded, Result: []byte("not json")}, false, true},
		{"the result of another invocation", executor.SessionRun{ExitCode: protocol.ExitSucceeded, Result: result(protocol.Result{InvocationSHA256: protocol.HashInvocation([]byte("forged"))})}, false, true},
		{"a result that names no invocation", executor.SessionRun{ExitCode: protocol.ExitSucceeded, Result: protocol.EncodeResult(protocol.Result{})}, false, true},
		{"never started", executor.SessionRun{NotRun: "the pod was replaced", Err: errors.New("x")}, false, false},
		{"a job that ended clean", executor.SessionRun{ExitCode: protocol.ExitSucceeded, Result: result(protocol.Result{})}, true, true},
		{"a job that never started", executor.SessionRun{NotRun: "stopped"}, true, true},
	}
	for _, tc := range cases {
		tc.run.InvocationSHA256 = sent
		if got := retireAfter(&tc.run, tc.job) != ""; got != tc.retire {
			t.Errorf("%s: retire %v, want %v", tc.name, got, tc.retire)
		}
	}
}
