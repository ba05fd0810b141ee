package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/protocol"
)

func TestInstallCopiesTheRunner(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "runner")
	if out, err := exec.Command(runnerBin, "install", dest).CombinedOutput(); err != nil {
		t.Fatalf("runner install: %v\n%s", err, out)
	}
	want, err := os.ReadFile(runnerBin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the installed copy (%d bytes) differs from the runner (%d bytes)", len(got), len(want))
	}
	info, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o111 {
		t.Errorf("installed mode = %o, want 111 (execute only)", mode)
	}
	// The copy is a working runner: with no invocation it reports an Exception.
	term := filepath.Join(t.TempDir(), "result")
	cmd := exec.Command(dest, "-workspace", t.TempDir(), "-termination-log", term)
	cmd.Env = []string{}
	if err := cmd.Run(); err == nil {
		t.Fatal("the installed runner with no invocation exited 0")
	}
	if b, _ := os.ReadFile(term); !strings.Contains(string(b), `"errorKind":"Exception"`) {
		t.Errorf("the installed runner's result = %s, want an Exception", b)
	}
}

func TestInstallErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "no destination", args: []string{"install"}, wantCode: 2, wantErr: "usage: runner install DEST"},
		{name: "two destinations", args: []string{"install", "a", "b"}, wantCode: 2, wantErr: "usage: runner install DEST"},
		{name: "missing folder", args: []string{"install", filepath.Join(t.TempDir(), "missing", "runner")}, wantCode: 1, wantErr: "the destination folder of"},
	}
	for _, tt := range tests {
		out, err := exec.Command(runnerBin, tt.args...).CombinedOutput()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != tt.wantCode || !strings.Contains(string(out), tt.wantErr) {
			t.Errorf("%s: runner %v = %v, %q; want exit %d with %q", tt.name, tt.args, err, out, tt.wantCode, tt.wantErr)
		}
	}
}

// A process of the sandbox's uid can open another one's stdin, the call's
// invocation, through /proc/PID/fd/0 while that process is dumpable; the runner
// makes itself non-dumpable first thing, but only once the Go runtime started. A
// binary its user cannot read is exec'd non-dumpable by the kernel, before any of
// its instructions runs. Here the installed runner is stopped right at its exec
// (ptrace), where a process of the same uid racing it would catch it, and its
// /proc/PID/fd must be root's, and its stdin closed to that uid.
func TestInstalledRunnerIsOutOfReachFromItsExec(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running the runner as another user needs root")
	}
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dest := filepath.Join(dir, "runner")
	if out, err := exec.Command(runnerBin, "install", dest).CombinedOutput(); err != nil {
		t.Fatalf("runner install: %v\n%s", err, out)
	}
	sandbox := &syscall.Credential{Uid: 65534, Gid: 65534}

	// The tracer is the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	call := exec.Command(dest, protocol.ExecCommand)
	call.Env = append([]string{"TOOLGATE_WORKSPACE=" + dir, outsideSessionEnv + "=1"}, heldTargets...)
	call.SysProcAttr = &syscall.SysProcAttr{Credential: sandbox, Ptrace: true}
	// In a pod, the exec's pipes belong to the sandbox's uid.
	stdin, feed, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = feed.Close() }()
	if err := stdin.Chown(int(sandbox.Uid), int(sandbox.Gid)); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	call.Stdin, call.Stdout, call.Stderr = stdin, &stdout, &stderr
	if err := call.Start(); err != nil {
		t.Fatal(err)
	}
	pid := call.Process.Pid
	defer func() { _ = call.Process.Kill(); _ = call.Wait() }()
	var status syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &status, 0, nil); err != nil || !status.Stopped() || status.StopSignal() != syscall.SIGTRAP {
		t.Fatalf("the runner did not stop at its exec: %v, status %v", err, status)
	}

	fd := fmt.Sprintf("/proc/%d/fd", pid)
	info, err := os.Stat(fd)
	if err != nil {
		t.Fatal(err)
	}
	if owner := info.Sys().(*syscall.Stat_t).Uid; owner != 0 {
		t.Errorf("%s of the runner stopped at its exec belongs to uid %d: the runner is dumpable until it runs, and its user can reach its stdin", fd, owner)
	}
	open := exec.Command("sh", "-c", ": < "+fd+"/0")
	open.SysProcAttr = &syscall.SysProcAttr{Credential: sandbox}
	if out, err := open.CombinedOutput(); err == nil {
		t.Errorf("a process of the runner's uid opened the runner's stdin (%s/0) before the runner ran: %s", fd, out)
	}

	// Let go, it runs its call as the sandbox's user: it never needs to read itself.
	if err := syscall.PtraceDetach(pid); err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(bashInvocation("call-execute-only", "echo ran", 4096))
	if _, err := feed.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	_ = call.Wait()
	res, err := protocol.DecodeResult(stderr.Bytes())
	if err != nil || stdout.String() != "ran\n" || res.ErrorKind != "" || res.UID != int(sandbox.Uid) || res.InvocationSHA256 != sha256Hex(line) {
		t.Errorf("the execute-only runner's call: output %q, result %+v (%v)", stdout.String(), res, err)
	}
}
