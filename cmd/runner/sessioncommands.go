package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/runner"
)

// outsideSessionEnv set to 1 lets `runner exec` run a call outside a session pod,
// without killing the rest of its PID namespace: for tests on a host. A session
// pod's environment is the controller's (its spec), never the tool's.
const outsideSessionEnv = "TOOLGATE_OUTSIDE_SESSION"

// inheritedPause is how often the session's PID 1 looks for processes a dead call
// left behind.
const inheritedPause = 100 * time.Millisecond

// runSession is `runner session`, the PID 1 of a session pod (see
// internal/runner/sessionloop.go). It never returns. It ignores SIGTERM, SIGINT,
// SIGHUP and SIGQUIT: a call's tool runs as the same uid and could otherwise end the
// session; the kubelet stops the pod with SIGKILL after its short grace period.
func runSession() {
	if err := runner.MakeNonDumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "toolgate runner: %v\n", err)
		os.Exit(1)
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	fmt.Fprintln(os.Stderr, "toolgate runner: session ready")
	runner.KillInherited("/proc", os.Getpid(), inheritedPause, nil)
}

// runExec is `runner exec`: one call delivered into a session pod. It returns the
// process's exit code.
func runExec(workspace string, stdin io.Reader, stdout, stderr io.Writer) int {
	res, output := execCall(workspace, stdin, stdout, stderr)
	if _, err := stdout.Write(output); err != nil {
		fmt.Fprintf(stderr, "toolgate runner: cannot send the output: %v\n", err)
		return protocol.ExitNoResult
	}
	// The Result is the last thing sent.
	if _, err := stderr.Write(protocol.EncodeResult(res)); err != nil {
		return protocol.ExitNoResult
	}
	return protocol.ProcessExitCode(res)
}

// execCall runs the call read from stdin and returns its Result and the output still
// to send (a background job's went to stdout as it came); every process of the call
// is gone when it returns.
func execCall(workspace string, stdin io.Reader, stdout, stderr io.Writer) (res protocol.Result, output []byte) {
	// The invocation comes on stdin, a pipe of the sandbox's uid that any process of
	// that uid could open through /proc/PID/fd/0 while this process is dumpable. It
	// is not, from its exec on: the pod's runner is execute-only (install), and the
	// kernel execs a binary its user cannot read non-dumpable. This call is for a
	// runner started otherwise (by hand, in tests); it comes after the Go runtime
	// started, which a process racing it can beat. What is left to a process of an
	// earlier call is to stop or kill this runner before KillOthers: the call then
	// never reports, and the controller retires the session.
	dumpErr := runner.MakeNonDumpable()
	subreaperErr := runner.BecomeSubreaper()
	in := bufio.NewReaderSize(stdin, 64<<10)
	line, err := runner.ReadInvocationLine(in)
	if err != nil {
		return protocol.Result{ExitCode: 1, ErrorKind: protocol.KindException, Message: "not run: " + err.Error(), UID: os.Getuid()}, nil
	}
	// Every Result from here on names the invocation read, whatever became of it.
	defer func() { res.InvocationSHA256 = protocol.HashInvocation(line) }()
	maxOutput, background := runner.SessionInvocation(line)
	// In a session pod, nothing but its PID 1 and this runner may be alive while the
	// call runs, before the tool starts and after it ended (runner.KillOthers). A
	// background job has a session pod of its own.
	// It fails closed: a runner that cannot tell it is in a session pod (a /proc
	// that hides PID 1) runs nothing, unless it is told it runs outside one (tests,
	// where the namespace is not the call's to kill).
	inSession := runner.InSession("/proc")
	if !inSession && os.Getenv(outsideSessionEnv) != "1" {
		return protocol.Result{ExitCode: 1, ErrorKind: protocol.KindException, Message: "not run: the runner cannot tell that it runs in a session pod (PID 1 is not `runner session` of its path, or /proc hides it), so it cannot make sure that nothing of an earlier call is left", UID: os.Getuid(), Unclean: true}, nil
	}
	if inSession {
		if err := runner.KillOthers("/proc", runner.DefaultSweepBound); err != nil {
			// What is left may see this call, and the next: the session is replaced.
			return protocol.Result{ExitCode: 1, ErrorKind: protocol.KindException, Message: "not run: the session is not clean: " + err.Error(), UID: os.Getuid(), Unclean: true}, nil
		}
	}
	capture := protocol.NewCapture(maxOutput)
	var log io.Writer = capture
	if background {
		// A background job: say it started, then send its output as it comes (the
		// controller keeps head and tail).
		started, _ := json.Marshal(protocol.Started{Started: true})
		if _, err := stderr.Write(append(started, '\n')); err != nil {
			return protocol.Result{ExitCode: 1, ErrorKind: protocol.KindException, Message: "not run: cannot report the job's start: " + err.Error(), UID: os.Getuid()}, nil
		}
		log = stdout
	}

	// The end of stdin stops the call: nobody is left to read its result.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel(fmt.Errorf("the controller's stream of the call closed"))
	}()
	res = func() (res protocol.Result) {
		defer func() {
			if p := recover(); p != nil {
				res = protocol.Result{ExitCode: 1, ErrorKind: protocol.KindException, Message: fmt.Sprintf("runner panicked: %v", p), UID: os.Getuid()}
			}
		}()
		return runner.Run(ctx, runner.Config{WorkspaceRoot: workspace, Log: log, Environ: os.Environ()}, line)
	}()
	switch {
	case dumpErr != nil:
		untrusted(&res, fmt.Errorf("the runner could not shield itself from the tool (%v)", dumpErr))
	case subreaperErr != nil:
		untrusted(&res, fmt.Errorf("the runner could not keep the tool's orphans below it (%v)", subreaperErr))
	}
	if err := runner.Sweep("/proc", runner.DefaultSweepBound); err != nil {
		untrusted(&res, err)
	} else if inSession {
		if err := runner.KillOthers("/proc", runner.DefaultSweepBound); err != nil {
			untrusted(&res, err)
		}
	}
	if background {
		return res, nil
	}
	return res, capture.Bytes(maxOutput)
}
