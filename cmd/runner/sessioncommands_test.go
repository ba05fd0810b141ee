package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/runner"
)

// sessionCall runs `runner exec` on ws as the controller delivers a call to a
// session pod: the invocation as stdin's first line, stdin kept open until the
// runner exits (unless hangUp closes it earlier).
type sessionCall struct {
	stdout, stderr []byte
	exitCode       int
	res            protocol.Result
}

func execInSession(t *testing.T, ws string, inv protocol.Invocation, hangUp <-chan struct{}) sessionCall {
	t.Helper()
	line, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(runnerBin, protocol.ExecCommand)
	cmd.Env = append([]string{"TOOLGATE_WORKSPACE=" + ws, "PATH=/usr/bin:/bin", outsideSessionEnv + "=1"}, heldTargets...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-hangUp:
		case <-exited:
		}
		_ = stdin.Close()
	}()
	err = cmd.Wait()
	close(exited)
	out := sessionCall{stdout: stdout.Bytes(), stderr: stderr.Bytes(), exitCode: cmd.ProcessState.ExitCode()}
	if err != nil && out.exitCode < 0 {
		t.Fatalf("runner exec: %v", err)
	}
	if out.res, err = protocol.DecodeResult(out.stderr); err != nil {
		t.Fatalf("stderr is not the Result: %v\n%s", err, out.stderr)
	}
	if want := protocol.ProcessExitCode(out.res); out.exitCode != want {
		t.Errorf("runner exited %d, its Result says %d", out.exitCode, want)
	}
	// The Result names the invocation the runner read: the line it was sent.
	if out.res.InvocationSHA256 != sha256Hex(line) {
		t.Errorf("the Result names invocation %q, want the sha256 of the line sent, %s", out.res.InvocationSHA256, sha256Hex(line))
	}
	return out
}

func bashInvocation(name, command string, maxOutput int32) protocol.Invocation {
	input, _ := json.Marshal(map[string]any{"command": command})
	return protocol.Invocation{ExecutionName: name, Tool: "bash", Input: input, TimeoutSeconds: 30, MaxOutputBytes: maxOutput}
}

func TestSessionExecRunsACallAndReportsOnStderr(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{"a.txt": "hello\n"})
	o := execInSession(t, ws, bashInvocation("call-1", "cat a.txt; echo oops >&2; exit 4", 4096), nil)
	// stdout and stderr come through pipes of their own, read side by side: their
	// lines interleave in the order the reads came, not always the order written.
	if got := string(o.stdout); got != "hello\noops\n" && got != "oops\nhello\n" {
		t.Errorf("stdout %q, want the call's combined output", o.stdout)
	}
	if o.res.ExitCode != 4 || o.res.ErrorKind != protocol.KindExitCode {
		t.Errorf("result %+v, want exit code 4", o.res)
	}
	if o.res.OutputSHA256 != sha256Hex(o.stdout) || o.res.StdoutBytes+o.res.StderrBytes != int64(len(o.stdout)) {
		t.Errorf("result's output size and hash do not describe what was sent: %+v", o.res)
	}
	if got := readFile(t, filepath.Join(ws, runner.ArtifactDir, "call-1", "output.log")); got != string(o.stdout) {
		t.Errorf("artifact %q, want what was sent, %q", got, o.stdout)
	}
}

func TestSessionExecSendsHeadAndTailOfLongOutput(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	const maxOutput = 1000
	o := execInSession(t, ws, bashInvocation("call-long", `i=0; while [ $i -lt 2000 ]; do printf '%05d\n' $i; i=$((i+1)); done`, maxOutput), nil)
	head, tail := protocol.OutputBudgets(maxOutput)
	if len(o.stdout) != head+tail {
		t.Fatalf("sent %d bytes, want head %d + tail %d", len(o.stdout), head, tail)
	}
	var full strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&full, "%05d\n", i)
	}
	want := full.String()
	if got := string(o.stdout[:head]); got != want[:head] {
		t.Errorf("head %q", got)
	}
	if got := string(o.stdout[head:]); got != want[len(want)-tail:] {
		t.Errorf("tail %q", got)
	}
	if !o.res.Truncated || o.res.StdoutBytes != int64(len(want)) || o.res.OutputSHA256 != sha256Hex([]byte(want)) {
		t.Errorf("result %+v does not describe the whole output", o.res)
	}
}

// A call's processes never outlive it, even the ones it detached: the next call of
// the session starts with none of them. The call waits until its detached sleep has
// a session of its own (setsid done, so the end of the call's process group misses
// it) and has lost its parent: only the runner, the reaper of its orphans, can find
// it then.
func TestSessionExecKillsWhatTheCallLeftBehind(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	o := execInSession(t, ws, bashInvocation("call-bg", `(setsid sleep 300 > /dev/null 2>&1 & echo $! > detached.pid); p=$(cat detached.pid); `+
		`until read -r _ _ _ _ _ sid _ < /proc/$p/stat && [ "$sid" = "$p" ]; do sleep 0.01; done; `+
		`nohup sleep 300 > /dev/null 2>&1 & echo $! > nohup.pid; echo left`, 4096), nil)
	if o.res.ErrorKind != "" {
		t.Fatalf("result %+v", o.res)
	}
	for _, name := range []string{"detached.pid", "nohup.pid"} {
		pid := readPid(t, filepath.Join(ws, name))
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("%s (pid %d) outlived its call", name, pid)
		}
	}
}

// The end of stdin (the controller gone) stops the call, which reports itself
// stopped, and kills its processes.
func TestSessionExecStopsWhenItsStreamCloses(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	hangUp := make(chan struct{})
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(filepath.Join(ws, "sleeper.pid")); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(hangUp)
	}()
	start := time.Now()
	o := execInSession(t, ws, bashInvocation("call-hangup", `sleep 300 & echo $! > sleeper.tmp; mv sleeper.tmp sleeper.pid; wait`, 4096), hangUp)
	if time.Since(start) > 20*time.Second {
		t.Errorf("the call ran %s after its stream closed", time.Since(start))
	}
	if o.res.ErrorKind != protocol.KindTimeout {
		t.Errorf("result %+v, want the call stopped", o.res)
	}
	if pid := readPid(t, filepath.Join(ws, "sleeper.pid")); alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the call's sleep (pid %d) outlived its stream", pid)
	}
}

func TestSessionExecRefusesABadInvocationLine(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	cmd := exec.Command(runnerBin, protocol.ExecCommand)
	cmd.Env = []string{"TOOLGATE_WORKSPACE=" + ws, outsideSessionEnv + "=1"}
	cmd.Stdin = strings.NewReader(`{"tool":"bash"`) // no end of line: stdin ends first
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	res, err := protocol.DecodeResult(stderr.Bytes())
	if err != nil {
		t.Fatalf("stderr is not a Result: %v: %q", err, stderr.String())
	}
	if res.ErrorKind != protocol.KindException || !strings.Contains(res.Message, "stdin ended before") || cmd.ProcessState.ExitCode() != protocol.ExitFailed {
		t.Errorf("result %+v exit %d", res, cmd.ProcessState.ExitCode())
	}
	if res.InvocationSHA256 != "" {
		t.Errorf("a runner that read no invocation names one: %q", res.InvocationSHA256)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q", stdout.String())
	}
}

// The session's PID 1 kills every process it inherits: what a dead call's runner
// left behind. Here the test process plays PID 1 for a child it is made the parent of.
func TestKillInheritedKillsOrphansOfTheSession(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { runner.KillInherited("/proc", os.Getpid(), 20*time.Millisecond, stop); close(done) }()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		t.Logf("the inherited process ended: %v", err)
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Error("the inherited process was not killed")
	}
	close(stop)
	<-done
}

// A background job (Invocation.Background): the runner's first line on stderr says
// it started; its
// output comes on stdout as it is produced, not at the end; the end of its stream
// stops it, kills what it started, and the Result, last on stderr, says why.
func TestSessionExecRunsABackgroundJob(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	inv := bashInvocation("job-1", `echo one; sleep 300 & echo $! > sleeper.pid; echo two; wait`, 4096)
	inv.Background = true
	line, _ := json.Marshal(inv)
	cmd := exec.Command(runnerBin, protocol.ExecCommand)
	cmd.Env = append([]string{"TOOLGATE_WORKSPACE=" + ws, "PATH=/usr/bin:/bin", outsideSessionEnv + "=1"}, heldTargets...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	if _, err := stdin.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	errLines := bufio.NewReader(stderr)
	first, err := errLines.ReadBytes('\n')
	if err != nil {
		t.Fatalf("no first line on stderr: %v", err)
	}
	var started protocol.Started
	if err := json.Unmarshal(first, &started); err != nil || !started.Started {
		t.Fatalf("first stderr line %q: want the job's start (%v)", first, err)
	}
	// The output arrives while the job runs.
	got := make([]byte, 0, 64)
	buf := make([]byte, 64)
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Contains(got, []byte("two\n")) && time.Now().Before(deadline) {
		n, err := stdout.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	if string(got) != "one\ntwo\n" {
		t.Fatalf("streamed output %q, want one and two while the job runs", got)
	}
	sleeper := readPid(t, filepath.Join(ws, "sleeper.pid"))
	if !alive(sleeper) {
		t.Fatalf("the job's sleep (pid %d) is not running", sleeper)
	}
	_ = stdin.Close() // job_kill, or the task's end
	rest, _ := io.ReadAll(errLines)
	_ = cmd.Wait()
	res, err := protocol.DecodeResult(bytes.TrimSpace(rest))
	if err != nil {
		t.Fatalf("the rest of stderr is not the Result: %v\n%s", err, rest)
	}
	if res.ErrorKind != protocol.KindTimeout || !strings.Contains(res.Message, "the controller's stream of the call closed") {
		t.Errorf("result %+v, want the job stopped by its stream's end, saying so", res)
	}
	if res.InvocationSHA256 != sha256Hex(line) {
		t.Errorf("the job's Result names invocation %q, want the sha256 of the line sent", res.InvocationSHA256)
	}
	if res.StdoutBytes != int64(len("one\ntwo\n")) {
		t.Errorf("result counts %d bytes of output, want %d", res.StdoutBytes, len("one\ntwo\n"))
	}
	if alive(sleeper) {
		_ = syscall.Kill(sleeper, syscall.SIGKILL)
		t.Errorf("the job's sleep (pid %d) outlived the job", sleeper)
	}
}

// sessionNS is `runner session` as the PID 1 of a PID namespace (and mount
// namespace, for its /proc) of its own, as in a session pod. It needs root
// (unshare, nsenter).
type sessionNS struct {
	t *testing.T
	// pid1 is the namespace's PID 1 as the host sees it.
	pid1 int
}

// startSession starts a session; it and every process of its namespace are gone
// when the test ends. It returns once PID 1 said it is ready.
func startSession(t *testing.T) *sessionNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace of its own needs root")
	}
	for _, tool := range []string{"unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	// --kill-child: the namespace's PID 1 (which ignores SIGTERM) dies with unshare,
	// however unshare ends, and with it every process of the namespace.
	session := exec.Command("unshare", "--pid", "--kill-child", "--mount-proc", runnerBin, protocol.SessionCommand)
	stderr, err := session.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := session.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sessionNS{t: t}
	t.Cleanup(func() {
		// The end of PID 1 ends the namespace; it is killed by its pid too, in case
		// unshare died before it could.
		if s.pid1 != 0 {
			_ = syscall.Kill(s.pid1, syscall.SIGKILL)
		}
		_ = session.Process.Kill()
		_ = session.Wait()
		if s.pid1 != 0 && !waitGone(t, s.pid1, 10*time.Second) {
			t.Errorf("the session's PID 1 (pid %d) outlived the test", s.pid1)
		}
	})
	ready := make(chan bool, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		said := false
		for lines.Scan() {
			if !said && lines.Text() == "toolgate runner: session ready" {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("runner session ended without saying it is ready")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runner session did not say it is ready")
	}
	// PID 1 of the namespace is unshare's child.
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", session.Process.Pid, session.Process.Pid))
	if _, err := fmt.Sscan(string(children), &s.pid1); err != nil {
		t.Fatalf("unshare has no child: %q", children)
	}
	return s
}

// enter is a command run in the session's namespaces, from outside: no descendant
// of a call's runner, no child of PID 1.
func (s *sessionNS) enter(args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--target", strconv.Itoa(s.pid1), "--pid", "--mount", "--"}, args...)...)
}

// stray puts a `sleep 300` into the session from outside (enter), which only
// KillOthers reaches, and returns its pid in the namespace and a channel closed
// once it ended. It is killed when the test ends.
func (s *sessionNS) stray() (nsPid int, ended <-chan struct{}) {
	t := s.t
	t.Helper()
	stray := s.enter("sleep", "300")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = stray.Wait(); close(done) }()
	t.Cleanup(func() { _ = stray.Process.Kill(); <-done })
	// nsenter forks into the namespace; the stray is its child once that runs sleep.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", stray.Process.Pid, stray.Process.Pid))
		var child int
		if _, err := fmt.Sscan(string(children), &child); err != nil {
			continue
		}
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child)); strings.TrimSpace(string(comm)) != "sleep" {
			continue
		}
		// NSpid: the pid in each namespace, the session's last.
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", child))
		for line := range strings.SplitSeq(string(status), "\n") {
			if ids, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(ids)
				nsPid, _ = strconv.Atoi(f[len(f)-1])
			}
		}
		if nsPid != 0 {
			return nsPid, done
		}
	}
	t.Fatal("the stray never ran sleep in the session's namespace")
	return 0, nil
}

// call runs a call in the session as the controller does (`runner exec`, stdin held
// open until it exits); during, when not nil, runs while the call does.
func (s *sessionNS) call(ws string, inv protocol.Invocation, during func()) (stdout string, res protocol.Result) {
	t := s.t
	t.Helper()
	line, _ := json.Marshal(inv)
	call := s.enter(append(append([]string{"env", "TOOLGATE_WORKSPACE=" + ws, "PATH=/usr/bin:/bin"}, heldTargets...), runnerBin, protocol.ExecCommand)...)
	stdin, err := call.StdinPipe() // held open for the call: its end would stop it
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	call.Stdout, call.Stderr = &out, &errOut
	if err := call.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during()
	}
	_ = call.Wait()
	res, err = protocol.DecodeResult(errOut.Bytes())
	if err != nil {
		t.Fatalf("the call's stderr is not a Result: %v: %q (output %q)", err, errOut.String(), out.String())
	}
	return out.String(), res
}

// waitForFile waits until path exists: what a call's tool writes to say it got
// that far.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s never appeared", path)
}

// A call's tool starts alone in its session: a process of the session that is not
// the call's (here one put into the namespace from outside, so no descendant of
// the call's runner and no child of PID 1) is dead before the tool starts. The
// tool looks for it.
func TestSessionCallStartsAloneInItsSession(t *testing.T) {
	s := startSession(t)
	stray, _ := s.stray()
	ws, _ := newWorkspace(t, nil)
	look := fmt.Sprintf(`if grep -qs '^%d (sleep) [^ZX]' /proc/%d/stat; then echo "a stray runs beside the tool"; else echo alone; fi`, stray, stray)
	out, res := s.call(ws, bashInvocation("call-alone", look, 4096), nil)
	if res.ErrorKind != "" || out != "alone\n" {
		t.Fatalf("the tool saw %q (result %+v): a process of the session that was not the call's ran beside it", out, res)
	}
}

// Nothing but PID 1 is left in the session after a call: a process that came into
// the session while the tool ran (from outside, so the runner's sweep of its own
// descendants misses it) is dead once the call reported.
func TestSessionCallLeavesNothingInItsSession(t *testing.T) {
	s := startSession(t)
	ws, _ := newWorkspace(t, nil)
	var ended <-chan struct{}
	out, res := s.call(ws, bashInvocation("call-then-alone", `touch started; while [ ! -e stray-in ]; do sleep 0.02; done; echo ran`, 4096), func() {
		waitForFile(t, filepath.Join(ws, "started"))
		_, ended = s.stray()
		writeFile(t, filepath.Join(ws, "stray-in"), "")
	})
	if res.ErrorKind != "" || out != "ran\n" {
		t.Fatalf("the call's output %q, result %+v", out, res)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("a process of the session that was not the call's survived the call")
	}
}

// The session's PID 1 ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT: a call's tool
// that sends them cannot end the session (its next call runs in it); only SIGKILL
// from outside (the kubelet) ends it.
func TestSessionOutlivesTheSignalsOfACall(t *testing.T) {
	s := startSession(t)
	// The kernel's record of the signals PID 1 ignores: they are dropped when sent.
	status := readFile(t, fmt.Sprintf("/proc/%d/status", s.pid1))
	var ignored uint64
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			ignored, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		if ignored&(1<<(sig-1)) == 0 {
			t.Errorf("the session's PID 1 does not ignore %v (SigIgn %x)", sig, ignored)
		}
	}
	ws, _ := newWorkspace(t, nil)
	out, res := s.call(ws, bashInvocation("call-signals", `for s in TERM INT HUP QUIT; do kill -s $s 1 || echo "kill -s $s 1 failed"; done; echo sent`, 4096), nil)
	if res.ErrorKind != "" || out != "sent\n" {
		t.Fatalf("the call's output %q, result %+v", out, res)
	}
	out, res = s.call(ws, bashInvocation("call-after", `echo still here`, 4096), nil)
	if res.ErrorKind != "" || out != "still here\n" {
		t.Fatalf("the call after the signals: output %q, result %+v", out, res)
	}
	if !alive(s.pid1) {
		t.Fatal("the session's PID 1 died")
	}
}

// `runner exec` fails closed: where it cannot tell that it runs in a session pod,
// and is not told it runs outside one, it runs nothing and says the session is not
// to be trusted.
func TestSessionExecRunsNothingOutsideASession(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	line, _ := json.Marshal(bashInvocation("call-outside", "touch ran", 4096))
	cmd := exec.Command(runnerBin, protocol.ExecCommand)
	cmd.Env = []string{"TOOLGATE_WORKSPACE=" + ws, "PATH=/usr/bin:/bin"}
	stdin, _ := cmd.StdinPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_, _ = stdin.Write(append(line, '\n'))
	_ = cmd.Wait()
	res, err := protocol.DecodeResult(stderr.Bytes())
	if err != nil {
		t.Fatalf("stderr is not a Result: %v: %q", err, stderr.String())
	}
	if res.ErrorKind != protocol.KindException || !res.Unclean || !strings.Contains(res.Message, "not run: the runner cannot tell that it runs in a session pod") {
		t.Errorf("result %+v", res)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Error("the call ran outside a session")
	}
}

// sandboxUser is who a test runs the runner as where it must not be root, as in a
// pod: nobody when the tests run as root, else nil, the tests' own user.
func sandboxUser() *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	return &syscall.Credential{Uid: 65534, Gid: 65534}
}

// openToSandbox lets the sandbox user write in dirs, and go through the folders
// above them up to the tests' temporary directory.
func openToSandbox(t *testing.T, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		for d := filepath.Dir(dir); d != os.TempDir() && d != filepath.Dir(d); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// reachProc is a shell command that says which of PID's /proc files a process can
// open: its environment, its stdin (a call's invocation and lifeline; opened, not
// read).
func reachProc(pid int) string {
	return fmt.Sprintf(`for f in environ fd/0; do (: < /proc/%d/$f) 2>/dev/null && echo "reached $f"; done; echo checked`, pid)
}

// The session's PID 1 is non-dumpable: a process of its user (a call's tool) can
// reach none of its /proc files.
func TestSessionPID1IsOutOfReachOfItsUser(t *testing.T) {
	session := exec.Command(runnerBin, protocol.SessionCommand)
	session.SysProcAttr = &syscall.SysProcAttr{Credential: sandboxUser()}
	stderr, err := session.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := session.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = session.Process.Kill(); _ = session.Wait() })
	if line, err := bufio.NewReader(stderr).ReadString('\n'); err != nil || line != "toolgate runner: session ready\n" {
		t.Fatalf("runner session said %q (%v), not that it is ready", line, err)
	}
	probe := exec.Command("sh", "-c", reachProc(session.Process.Pid))
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: sandboxUser()}
	if out, err := probe.CombinedOutput(); err != nil || string(out) != "checked\n" {
		t.Errorf("a process of the session's user reached its PID 1: %q (%v)", out, err)
	}
}

// A call's runner is non-dumpable: its tool, of the same user, can reach none of
// the runner's /proc files (its stdin is the invocation, its memory the output and
// Result), while the tool's own are the tool's.
func TestSessionExecIsOutOfReachOfItsTool(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	tmp := t.TempDir()
	openToSandbox(t, ws, tmp)
	cmd := exec.Command(runnerBin, protocol.ExecCommand)
	cmd.Env = append([]string{"TOOLGATE_WORKSPACE=" + ws, "PATH=/usr/bin:/bin", "TMPDIR=" + tmp, outsideSessionEnv + "=1"}, heldTargets...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: sandboxUser()}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close() }()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(bashInvocation("call-reach", `cat /proc/$$/environ >/dev/null && echo "own environ"; `+reachProc(cmd.Process.Pid), 4096))
	if _, err := stdin.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	res, err := protocol.DecodeResult(stderr.Bytes())
	if err != nil {
		t.Fatalf("stderr is not a Result: %v: %q", err, stderr.String())
	}
	if res.ErrorKind != "" || stdout.String() != "own environ\nchecked\n" {
		t.Errorf("the tool's output %q (result %+v): it reached its runner", stdout.String(), res)
	}
}

// In a session too, a call with NoOutputCopy leaves no copy of its output in the
// workspace.
func TestSessionExecNoOutputCopy(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{"a.txt": "hello\n"})
	inv := bashInvocation("call-1", "cat a.txt", 4096)
	inv.Walls.NoOutputCopy = true
	o := execInSession(t, ws, inv, nil)
	if string(o.stdout) != "hello\n" || o.res.ArtifactPath != "" {
		t.Fatalf("stdout %q, result %+v", o.stdout, o.res)
	}
	if _, err := os.Stat(filepath.Join(ws, runner.ArtifactDir, "call-1")); !os.IsNotExist(err) {
		t.Errorf("the session call's output was copied into the workspace (%v)", err)
	}
}
