// Command runner runs one tool invocation inside an Execution's container. Its wire
// contract is in internal/runner/protocol.go. Usage:
//
//	runner [-workspace DIR] [-termination-log PATH]
//	runner install DEST
//
// The Invocation is read as JSON from TOOLGATE_INVOCATION (required). The workspace
// root is -workspace, else TOOLGATE_WORKSPACE, else /workspace; the Result goes to
// -termination-log, else TOOLGATE_TERMINATION_LOG, else /dev/termination-log. stdout
// carries only the tool's combined output. The exit code is 0 when the tool succeeded,
// else the tool's exit code (124 on a timeout), or 1 when the tool could not run
// (Exception) or refused to write (Stale). On SIGTERM or SIGINT the tool's process
// group is killed and the Result is still written. The second form copies the runner
// binary to DEST, for the Job's init container.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/runner"
)

// Environment variables that override the pod's fixed locations, for tests and for
// running the runner by hand.
const (
	workspaceEnv      = "TOOLGATE_WORKSPACE"
	terminationLogEnv = "TOOLGATE_TERMINATION_LOG"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == installCommand {
		runInstall(os.Args[2:])
		return
	}
	workspace := flag.String("workspace", envOr(workspaceEnv, runner.WorkspaceRoot), "Workspace root every tool path is confined to (env "+workspaceEnv+").")
	terminationLog := flag.String("termination-log", envOr(terminationLogEnv, runner.TerminationMessagePath), "File the JSON result is written to (env "+terminationLogEnv+").")
	flag.Parse()

	res := run(*workspace)
	if err := os.WriteFile(*terminationLog, runner.EncodeResult(res), 0o644); err != nil {
		// stderr is the only place left to say it; the controller sees no result and
		// reports an Exception.
		fmt.Fprintf(os.Stderr, "toolgate runner: cannot write the result to %s: %v\n", *terminationLog, err)
		os.Exit(1)
	}
	os.Exit(processExitCode(res))
}

// run runs the invocation from the environment; a panic outside runner.Run (which
// recovers its own) still yields a Result.
func run(workspace string) (res runner.Result) {
	defer func() {
		if p := recover(); p != nil {
			res = runner.Result{ExitCode: 1, ErrorKind: runner.KindException, Message: fmt.Sprintf("runner panicked: %v", p), UID: os.Getuid()}
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg := runner.Config{
		WorkspaceRoot: workspace,
		Log:           os.Stdout,
		Environ:       os.Environ(),
	}
	return runner.Run(ctx, cfg, []byte(os.Getenv(runner.InvocationEnv)))
}

// processExitCode is the runner's exit code for res, so the Job's status agrees with
// the Result: 0 only on success, and never 0 for a failure.
func processExitCode(res runner.Result) int {
	code := res.ExitCode
	if code < 0 || code > 255 {
		code = 1
	}
	if res.ErrorKind != "" && code == 0 {
		code = 1
	}
	return code
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
