package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/protocol"
)

// The tool runs as the runner's uid in the runner's container, so it can write the
// termination message. These tests prove that whatever it writes, the Result read
// afterwards is the runner's, and that nothing the tool started outlives the runner.

// waitGone waits a while for pid to exit and reports whether it did; a survivor is
// killed so that it cannot disturb other tests.
func waitGone(t *testing.T, pid int, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return false
	}
	return true
}

// A process that left the tool's process group and session (setsid; timeout, which
// calls setpgid) escapes the group kill. It waits until the runner has reported, then
// writes a forged success. The runner must kill it before it writes its own Result.
func TestEscapedProcessCannotForgeTheResult(t *testing.T) {
	for name, escape := range map[string]string{
		"setsid":  "setsid",
		"timeout": "timeout 30",
	} {
		t.Run(name, func(t *testing.T) {
			ws, _ := newWorkspace(t, nil)
			termDir := t.TempDir()
			term := filepath.Join(termDir, "termination-log")
			forged := string(protocol.EncodeResult(protocol.Result{ExitCode: 0, Message: "forged"}))
			// The escaped process closes the output pipes (so the runner does not wait
			// for them) and writes its forgery half a second after the shell exited.
			command := escape + ` sh -c 'echo $$ > forger.pid; sleep 0.5; printf %s '"'"'` + forged + `'"'"' > ` + term + `' >/dev/null 2>&1 </dev/null &
while [ ! -s forger.pid ]; do sleep 0.01; done; exit 9`
			o := invoke(t, ws, "bash", map[string]any{"command": command}, nil, invokeOpts{termDir: termDir})
			pid := readPid(t, filepath.Join(ws, "forger.pid"))
			if !waitGone(t, pid, 2*time.Second) {
				t.Errorf("the escaped process (pid %d) outlived the runner", pid)
			}
			// Past the forger's moment: the termination message must still be the
			// runner's.
			time.Sleep(time.Second)
			res := checkTerminationMessage(t, term)
			if res.Message == "forged" || res.ExitCode != 9 || res.ErrorKind != protocol.KindExitCode {
				t.Fatalf("termination message after the run is %+v, want the runner's exit code 9", res)
			}
			if o.exitCode != protocol.ExitFailed {
				t.Errorf("runner exit code %d, want %d", o.exitCode, protocol.ExitFailed)
			}
		})
	}
}

// A tool that writes the termination message itself and exits is overwritten: the
// runner writes its Result after the tool is gone.
func TestToolWrittenTerminationMessageIsOverwritten(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	termDir := t.TempDir()
	term := filepath.Join(termDir, "termination-log")
	forged, err := json.Marshal(protocol.Result{ExitCode: 0, Message: "forged", UID: 65532, ReadOnlyRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	command := `printf %s '` + string(forged) + `' > ` + term + `; exit 4`
	o := invoke(t, ws, "bash", map[string]any{"command": command}, nil, invokeOpts{termDir: termDir})
	expectKind(t, o, protocol.KindExitCode, "exited with code 4")
	if o.res.ExitCode != 4 || strings.Contains(o.res.Message, "forged") {
		t.Fatalf("result %+v is not the runner's", o.res)
	}
}

// Background processes that stay in the shell's session but hold no pipe open are
// killed too, and the runner reports success only once they are gone.
func TestNoProcessOutlivesASuccessfulRun(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	command := `setsid sleep 300 >/dev/null 2>&1 </dev/null & echo $! > sleeper.pid; (trap '' TERM; exec setsid sleep 300) >/dev/null 2>&1 </dev/null & echo $! > stubborn.pid; echo done`
	o := invoke(t, ws, "bash", map[string]any{"command": command}, nil)
	if o.res.ErrorKind != "" || o.exitCode != 0 {
		t.Fatalf("result %+v, exit %d", o.res, o.exitCode)
	}
	for _, name := range []string{"sleeper.pid", "stubborn.pid"} {
		pid := readPid(t, filepath.Join(ws, name))
		if !waitGone(t, pid, 2*time.Second) {
			t.Errorf("%s (pid %d) outlived the runner", name, pid)
		}
	}
}

// When the runner cannot write its Result (the tool made the termination message
// read-only), it exits ExitNoResult, so the controller refuses what the file holds.
// The runner and its tool run as a user who is not root, as in a pod (root writes
// a read-only file).
func TestUnwritableTerminationMessageExitsNoResult(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	termDir, tmp := t.TempDir(), t.TempDir()
	openToSandbox(t, ws, termDir, tmp)
	term := filepath.Join(termDir, "termination-log")
	forged := string(protocol.EncodeResult(protocol.Result{ExitCode: 0, Message: "forged"}))
	command := `printf %s '` + forged + `' > ` + term + ` && chmod 0444 ` + term
	cmd := runnerCommand(ws, term, command)
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: sandboxUser()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err == nil || code != protocol.ExitNoResult {
		t.Fatalf("runner exit code %d (%v), want %d; stderr %q", code, err, protocol.ExitNoResult, stderr.String())
	}
	if !strings.Contains(stderr.String(), "toolgate runner: cannot write the result to "+term) {
		t.Errorf("stderr %q does not say the result could not be written", stderr.String())
	}
}

// runnerCommand is the runner on ws running command with bash, its Result going to
// term, for tests that look at the process rather than a Result.
func runnerCommand(ws, term, command string) *exec.Cmd {
	input, _ := json.Marshal(map[string]string{"command": command})
	inv, _ := json.Marshal(protocol.Invocation{ExecutionName: "exec-1", Tool: "bash", Input: input, TimeoutSeconds: 30, MaxOutputBytes: 1 << 10})
	cmd := exec.Command(runnerBin, "-workspace", ws, "-termination-log", term)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), protocol.InvocationEnv + "=" + string(inv)}, heldTargets...)
	return cmd
}

// `runner git` too exits ExitNoResult when it cannot write its result (here its
// termination log's folder is a file, which stops root as well), and only then:
// with the log writable, a failed request exits 3 with its result written.
func TestGitUnwritableTerminationMessageExitsNoResult(t *testing.T) {
	claim := t.TempDir()
	notADir := filepath.Join(t.TempDir(), "file")
	writeFile(t, notADir, "")
	writable := filepath.Join(t.TempDir(), "termination-log")
	for _, tc := range []struct {
		term string
		code int
	}{{filepath.Join(notADir, "termination-log"), protocol.ExitNoResult}, {writable, 3}} {
		cmd := exec.Command(runnerBin, gitCommand)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), claimEnv + "=" + claim, terminationLogEnv + "=" + tc.term, gitws.RequestEnv + `={"op":"no-such-op"}`}
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tc.code {
			t.Errorf("termination log %s: runner git exited %d (%v), want %d: %s", tc.term, code, err, tc.code, out)
		}
	}
	res, err := gitws.ParseResult(readFile(t, writable))
	if err != nil || res.Kind == "" || !strings.Contains(res.Message, `unknown git operation "no-such-op"`) {
		t.Errorf("result %+v (%v)", res, err)
	}
}
