// Command runner runs one tool invocation inside an Execution's container. Its wire
// contract is package protocol (internal/protocol). Usage:
//
//	runner [-workspace DIR] [-termination-log PATH]
//	runner install DEST
//	runner session
//	runner exec
//	runner git
//
// The Invocation is read as JSON from TOOLGATE_INVOCATION (required). The workspace
// root is -workspace, else TOOLGATE_WORKSPACE, else /workspace; the Result goes to
// -termination-log, else TOOLGATE_TERMINATION_LOG, else /dev/termination-log. Before
// the tool starts, the runner proves the call's walls (internal/runner/walls.go),
// trying the targets its own environment names: KUBERNETES_SERVICE_HOST and _PORT,
// TOOLGATE_NODE_IP, and for tests TOOLGATE_KUBELET_PORT and TOOLGATE_DNS_SERVER. stdout
// carries only the tool's combined output. Before the Result is written, every other
// process of the container (or, when the runner is not the container's PID 1, every
// process below it) is killed, so that nothing the tool left behind can overwrite it.
// The exit code is 0 when the Result says the tool succeeded, 3 when it says the tool
// failed (the tool's exit code is in the Result), 1 when no Result could be written
// (protocol.ProcessExitCode). On SIGTERM or SIGINT the tool's process group is killed
// and the Result is still written. The second form copies the runner binary to DEST,
// for the Job's init container. The last two run a session pod and one call in it
// (internal/protocol/sessioncall.go, internal/runner/sessionloop.go); exec takes the
// workspace from TOOLGATE_WORKSPACE.
// The last one is toolgate's own clone, change or push of a git workspace, or
// copy of another task's workspace (internal/gitws), never a tool call.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/workspace"
)

// Environment variables that override the pod's fixed locations, for tests and for
// running the runner by hand.
const (
	workspaceEnv      = "TOOLGATE_WORKSPACE"
	terminationLogEnv = "TOOLGATE_TERMINATION_LOG"
	// claimEnv overrides where a git pod's claim is mounted.
	claimEnv   = "TOOLGATE_CLAIM"
	gitCommand = "git"
)

// runGit carries out the workspace request of TOOLGATE_GIT (a git step, or a copy
// of another task's workspace) on the claim: a change's diff goes to stdout, the
// result to the termination log. It exits 0 when the request succeeded, 3 when it
// failed (the result says why), 1 when no result could be written.
func runGit(claim, terminationLog string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	m := gitws.Mounts{Claim: claim, CopySource: gitws.PodCopySourceRoot}
	if _, err := os.Stat(gitws.PodCredentialsDir); err == nil {
		m.Credentials = gitws.PodCredentialsDir
	}
	res := gitws.Run(ctx, []byte(os.Getenv(gitws.RequestEnv)), m, os.Stdout)
	if err := os.WriteFile(terminationLog, res.Encode(), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "toolgate runner: cannot write the result to %s: %v\n", terminationLog, err)
		return protocol.ExitNoResult
	}
	if res.Kind != "" {
		fmt.Fprintf(os.Stderr, "toolgate runner: workspace %s failed (%s): %s\n", res.Op, res.Kind, res.Message)
		return 3
	}
	return 0
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case installCommand:
			runInstall(os.Args[2:])
			return
		case protocol.SessionCommand:
			runSession()
			return
		case protocol.ExecCommand:
			os.Exit(runExec(envOr(workspaceEnv, workspace.Root), os.Stdin, os.Stdout, os.Stderr))
		case gitCommand:
			os.Exit(runGit(envOr(claimEnv, gitws.PodClaimRoot), envOr(terminationLogEnv, protocol.TerminationMessagePath)))
		}
	}
	root := flag.String("workspace", envOr(workspaceEnv, workspace.Root), "Workspace root every tool path is confined to (env "+workspaceEnv+").")
	terminationLog := flag.String("termination-log", envOr(terminationLogEnv, protocol.TerminationMessagePath), "File the JSON result is written to (env "+terminationLogEnv+").")
	flag.Parse()

	// Before the tool starts: its orphans must stay below the runner for the sweep.
	subreaperErr := runner.BecomeSubreaper()
	invocation := []byte(os.Getenv(protocol.InvocationEnv))
	res := run(*root, invocation)
	res.InvocationSHA256 = protocol.HashInvocation(invocation)
	if err := runner.Sweep("/proc", runner.DefaultSweepBound); err != nil {
		untrusted(&res, err)
	} else if subreaperErr != nil && os.Getpid() != 1 {
		untrusted(&res, fmt.Errorf("the runner could not keep the tool's orphans below it (%v), so processes that left it may still run", subreaperErr))
	}
	// The Result is written last: nothing of the tool is left to write after it.
	if err := os.WriteFile(*terminationLog, protocol.EncodeResult(res), 0o644); err != nil {
		// stderr is the only place left to say it; the controller sees the exit code
		// and refuses whatever the termination message holds.
		fmt.Fprintf(os.Stderr, "toolgate runner: cannot write the result to %s: %v\n", *terminationLog, err)
		os.Exit(protocol.ExitNoResult)
	}
	os.Exit(protocol.ProcessExitCode(res))
}

// untrusted turns res into an Exception because processes of the call may still run:
// what they do after the runner reported is in no Result.
func untrusted(res *protocol.Result, err error) {
	msg := "processes of the call may still be running, so this result may not be all the call did: " + err.Error()
	if res.Message != "" {
		msg = res.Message + "; " + msg
	}
	res.ErrorKind, res.Message, res.Unclean = protocol.KindException, msg, true
	if res.ExitCode == 0 {
		res.ExitCode = 1
	}
}

// run runs the invocation read from the environment; a panic outside runner.Run
// (which recovers its own) still yields a Result.
func run(workspace string, invocation []byte) (res protocol.Result) {
	defer func() {
		if p := recover(); p != nil {
			res = protocol.Result{ExitCode: 1, ErrorKind: protocol.KindException, Message: fmt.Sprintf("runner panicked: %v", p), UID: os.Getuid()}
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg := runner.Config{
		WorkspaceRoot: workspace,
		Log:           os.Stdout,
		Environ:       os.Environ(),
	}
	return runner.Run(ctx, cfg, invocation)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
