package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/tools"
)

// defaultPath is the PATH for bash when the container's environment has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// pipeDrainTimeout bounds how long the runner waits for the output pipes to close after
// the process group is gone: a process that left the group (setsid) can hold them open.
const pipeDrainTimeout = 2 * time.Second

// runBash runs the command with a fresh bash in its own process group. Only bash: the
// policy classified the command as bash reads it, and another shell (dash, busybox
// ash) can read the same string as other commands, so an image without bash on PATH
// is an Exception, never a fallback. The shell gets a minimal
// environment: PATH (the container's, which is the image's), LANG,
// protocol.Invocation.Env, and an empty home of its own (home.go); nothing else of
// the runner's environment leaks in.
func runBash(ctx context.Context, ic *invocationContext) error {
	var in tools.BashInput
	if err := decodeInput(ic, &in); err != nil {
		return err
	}
	if strings.TrimSpace(in.Command) == "" {
		return exceptionf("input field command of bash is empty")
	}
	for k, v := range ic.inv.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return exceptionf("invocation field env has an invalid variable %q: names must be non-empty without '=' or NUL, values without NUL", k)
		}
		if err := checkEnvName(k); err != nil {
			return err
		}
	}
	workdir := ic.inv.Workdir
	if workdir == "" {
		workdir = in.Workdir
	}
	rel, err := ic.ws.Rel(workdir)
	if err != nil {
		return err
	}
	dir, err := ic.ws.realPath(workdir, rel)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return exceptionf("workdir %q is not a directory in the workspace", workdir)
	}

	timeout := time.Duration(ic.inv.TimeoutSeconds) * time.Second
	if in.TimeoutMs > 0 && time.Duration(in.TimeoutMs)*time.Millisecond < timeout {
		timeout = time.Duration(in.TimeoutMs) * time.Millisecond
	}

	home, err := makeHome(ic.cfg.HomeParent)
	if err != nil {
		return err
	}
	// Once the process group is gone. A process that left the group (setsid) and
	// writes into the home can make this fail; the sweep kills it, and the folder's
	// random name is never another call's home.
	defer func() { _ = removeHome(home) }()
	env := bashEnv(ic.cfg.Environ, home, ic.inv.Env)
	shell, err := findBash(env)
	if err != nil {
		return err
	}
	cmd := exec.Command(shell, "-c", in.Command)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = nil // /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	// Own pipes, so Wait returns when the shell exits rather than when every holder
	// of the pipes has closed them; the readers drain them afterwards.
	outR, outW, err := os.Pipe()
	if err != nil {
		return exceptionf("cannot create the output pipe: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return exceptionf("cannot create the output pipe: %v", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	startErr := cmd.Start()
	_ = outW.Close()
	_ = errW.Close()
	if startErr != nil {
		_ = outR.Close()
		_ = errR.Close()
		return exceptionf("cannot start %s: %v", shell, startErr)
	}
	pgid := cmd.Process.Pid

	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); _, _ = io.Copy(ic.out.stdoutWriter(), outR) }()
	go func() { defer readers.Done(); _, _ = io.Copy(ic.out.stderrWriter(), errR) }()

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var killedBy string
	var waitErr error
	select {
	case waitErr = <-waited:
	case <-timer.C:
		killedBy = fmt.Sprintf("timed out after %s", timeout)
		waitErr = killGroup(pgid, waited, ic.cfg.KillGrace)
	case <-ctx.Done():
		killedBy = "was stopped: " + stopCause(ctx)
		if errors.Is(context.Cause(ctx), errTimedOut) {
			killedBy = fmt.Sprintf("timed out after %s", timeout)
		}
		waitErr = killGroup(pgid, waited, ic.cfg.KillGrace)
	}
	ic.done()
	// Background processes do not outlive the call: the pod ends with it anyway, and
	// they would keep the output pipes open.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	drainPipes(&readers, outR, errR)

	if killedBy != "" {
		ic.res.ExitCode = protocol.TimeoutExitCode
		return &toolError{kind: protocol.KindTimeout, msg: fmt.Sprintf("command %s; its process group was killed (SIGTERM, then SIGKILL after %s)", killedBy, ic.cfg.KillGrace)}
	}
	code, err := exitCode(waitErr)
	if err != nil {
		return exceptionf("waiting for %s: %v", shell, err)
	}
	ic.res.ExitCode = code
	if code != 0 {
		return &toolError{kind: protocol.KindExitCode, msg: fmt.Sprintf("command exited with code %d", code)}
	}
	return nil
}

// killGroup sends SIGTERM to the process group, waits up to grace for the shell to
// exit, then sends SIGKILL to the whole group (children that ignore SIGTERM or outlive
// the shell go too). It returns the shell's wait error.
func killGroup(pgid int, waited <-chan error, grace time.Duration) error {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-waited:
		// The shell is gone, but a child may ignore SIGTERM: give the group the same
		// grace, then kill what is left.
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		if groupAlive(pgid) {
			<-t.C
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return err
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return <-waited
	}
}

// groupAlive reports whether any process of the group still exists.
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

// drainPipes waits for the readers to reach EOF, and closes the pipes after
// pipeDrainTimeout if something outside the process group still holds them.
func drainPipes(readers *sync.WaitGroup, pipes ...*os.File) {
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(pipeDrainTimeout):
		for _, p := range pipes {
			_ = p.Close()
		}
		<-done
	}
	for _, p := range pipes {
		_ = p.Close()
	}
}

// exitCode turns the shell's wait error into an exit code; a shell killed by a signal
// exits 128+signal, as shells report it.
func exitCode(waitErr error) (int, error) {
	if waitErr == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return 0, waitErr
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ee.ExitCode(), nil
}

// bashEnv builds the shell's environment: PATH from the container (or defaultPath),
// LANG C.UTF-8, extra (which checkEnvName keeps off the home's variables), then the
// call's home (homeEnv), sorted for determinism.
func bashEnv(environ []string, home string, extra map[string]string) []string {
	vars := map[string]string{"PATH": defaultPath, "LANG": "C.UTF-8"}
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && v != "" {
			vars["PATH"] = v
		}
	}
	maps.Copy(vars, extra)
	maps.Copy(vars, homeEnv(home))
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// findBash returns bash from the shell's PATH.
func findBash(env []string) (string, error) {
	path := ""
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = p
			for _, dir := range filepath.SplitList(p) {
				if dir == "" || !filepath.IsAbs(dir) {
					continue
				}
				candidate := filepath.Join(dir, "bash")
				if fi, err := os.Stat(candidate); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
					return candidate, nil
				}
			}
		}
	}
	return "", exceptionf("the sandbox image has no bash on PATH (%s): the bash tool runs commands with bash, the shell its policy classified them for; use an image with bash", path)
}
