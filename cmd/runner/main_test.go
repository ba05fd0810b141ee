package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/leakcheck"
	"github.com/toolgate/toolgate/internal/protocol"
)

// runnerBin is the runner, built once as a static binary for every test.
var runnerBin string

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(func() int { return runTests(m) }))
}

// runTests builds the runner into a folder of the run and runs the tests.
func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "runner-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// Other users (the read-only workspace test runs the runner as nobody) must be
	// able to execute it.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	runnerBin = filepath.Join(dir, "runner")
	build := exec.Command("go", "build", "-o", runnerBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the runner:", err)
		return 1
	}
	return m.Run()
}

// heldTargets are probe targets where every connection and query is refused
// (nothing listens on port 1 of the loopback), as a fenced pod sees them: a call
// with no network runs.
var heldTargets = []string{
	"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1",
	protocol.NodeIPEnv + "=127.0.0.1", protocol.KubeletPortEnv + "=1", protocol.DNSServerEnv + "=127.0.0.1:1",
}

// outcome is one run of the runner binary.
type outcome struct {
	res      protocol.Result
	stdout   []byte
	stderr   []byte
	exitCode int
}

type invokeOpts struct {
	env        []string // extra environment of the runner process
	credential *syscall.Credential
	termDir    string
	whileRun   func(cmd *exec.Cmd)
}

// invoke runs the runner on ws with an Invocation for tool and input, and checks what
// must hold for every run: the termination message is valid JSON within the limit, the
// runner printed nothing but the tool's output (its hash and size match the result),
// the artifact (when written) is the same bytes, and the exit code agrees.
func invoke(t *testing.T, ws, tool string, input any, mutate func(*protocol.Invocation), opts ...invokeOpts) outcome {
	t.Helper()
	var o invokeOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	raw, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	inv := protocol.Invocation{
		ExecutionName:  "exec-1",
		Tool:           tool,
		Input:          raw,
		TimeoutSeconds: 30,
		MaxOutputBytes: 64 << 10,
	}
	if mutate != nil {
		mutate(&inv)
	}
	invJSON, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	return invokeRaw(t, ws, string(invJSON), o)
}

func invokeRaw(t *testing.T, ws, invJSON string, o invokeOpts) outcome {
	t.Helper()
	termDir := o.termDir
	if termDir == "" {
		termDir = t.TempDir()
	}
	term := filepath.Join(termDir, "termination-log")
	cmd := exec.Command(runnerBin, "-workspace", ws, "-termination-log", term)
	cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH"), protocol.InvocationEnv + "=" + invJSON}, heldTargets...), o.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if o.credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.credential}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if o.whileRun != nil {
		o.whileRun(cmd)
	}
	err := cmd.Wait()
	var out outcome
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		out.exitCode = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	out.stdout, out.stderr = stdout.Bytes(), stderr.Bytes()
	out.res = checkTerminationMessage(t, term)
	// The Result names the invocation the runner read from its environment.
	if want := hashOrNone(invJSON); out.res.InvocationSHA256 != want {
		t.Errorf("the Result names invocation %q, want %q (the sha256 of %s)", out.res.InvocationSHA256, want, protocol.InvocationEnv)
	}
	checkOutputFacts(t, ws, out)
	return out
}

// checkTerminationMessage asserts the contract of the termination message.
func checkTerminationMessage(t *testing.T, term string) protocol.Result {
	t.Helper()
	msg, err := os.ReadFile(term)
	if err != nil {
		t.Fatalf("no termination message: %v", err)
	}
	if len(msg) > protocol.MaxTerminationMessageBytes {
		t.Fatalf("termination message is %d bytes, more than %d", len(msg), protocol.MaxTerminationMessageBytes)
	}
	if !json.Valid(msg) {
		t.Fatalf("termination message is not valid JSON: %q", msg)
	}
	res, err := protocol.DecodeResult(msg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func checkOutputFacts(t *testing.T, ws string, o outcome) {
	t.Helper()
	if len(o.stderr) != 0 {
		t.Errorf("runner wrote to stderr: %q", o.stderr)
	}
	if got, want := o.res.StdoutBytes+o.res.StderrBytes, int64(len(o.stdout)); got != want && o.res.OutputSHA256 != "" {
		t.Errorf("stdoutBytes+stderrBytes = %d, but the runner printed %d bytes", got, want)
	}
	if o.res.OutputSHA256 != "" && o.res.OutputSHA256 != sha256Hex(o.stdout) {
		t.Errorf("outputSHA256 %s does not match the printed output's %s", o.res.OutputSHA256, sha256Hex(o.stdout))
	}
	if o.res.ArtifactPath != "" {
		art, err := os.ReadFile(filepath.Join(ws, o.res.ArtifactPath))
		if err != nil {
			t.Errorf("artifact: %v", err)
		} else if !bytes.Equal(art, o.stdout) {
			t.Errorf("artifact (%d bytes) differs from the printed output (%d bytes)", len(art), len(o.stdout))
		}
	}
	// The exit code says which Result was written (0 success, ExitFailed failure), so
	// the controller can refuse a termination message the runner did not write.
	if want := protocol.ProcessExitCode(o.res); o.exitCode != want {
		t.Errorf("runner exited %d, result (exitCode %d, errorKind %q) wants %d", o.exitCode, o.res.ExitCode, o.res.ErrorKind, want)
	}
	if (o.res.ErrorKind == "") != (o.exitCode == 0) {
		t.Errorf("errorKind %q with exit code %d", o.res.ErrorKind, o.exitCode)
	}
}

// hashOrNone is what a Result names of an invocation: its sha256, nothing for none.
func hashOrNone(invocation string) string {
	if invocation == "" {
		return ""
	}
	return sha256Hex([]byte(invocation))
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// newWorkspace returns a workspace with files, and beside it an "outside" folder with
// outside/secret.txt that no tool may read or write.
func newWorkspace(t *testing.T, files map[string]string) (ws, outside string) {
	t.Helper()
	root := t.TempDir()
	ws = filepath.Join(root, "ws")
	outside = filepath.Join(root, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(outside, "secret.txt"), "secret\n")
	for name, content := range files {
		writeFile(t, filepath.Join(ws, name), content)
	}
	return ws, outside
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func expectKind(t *testing.T, o outcome, kind, msgPart string) {
	t.Helper()
	if o.res.ErrorKind != kind {
		t.Fatalf("errorKind = %q (message %q), want %q", o.res.ErrorKind, o.res.Message, kind)
	}
	if !strings.Contains(o.res.Message, msgPart) {
		t.Fatalf("message %q does not say %q", o.res.Message, msgPart)
	}
}

// snapshot lists every path under dir with its content, to prove nothing changed.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(rel, ".toolgate") {
			return nil
		}
		switch {
		case d.Type()&os.ModeSymlink != 0:
			dest, _ := os.Readlink(p)
			files[rel] = "-> " + dest
		case d.IsDir():
			files[rel] = "dir"
		default:
			files[rel] = readFile(t, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func sameSnapshot(t *testing.T, before, after map[string]string) {
	t.Helper()
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("files changed:\nbefore %v\nafter  %v", before, after)
	}
}

func TestBashRunsCommandAndReportsStreams(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{"sub/f.txt": "x"})
	o := invoke(t, ws, "bash", map[string]any{"command": "printf out; printf errs >&2; ls"}, nil)
	if o.res.ErrorKind != "" || o.exitCode != 0 {
		t.Fatalf("result %+v", o.res)
	}
	if o.res.StdoutBytes != int64(len("out")+len("sub\n")) || o.res.StderrBytes != 4 {
		t.Errorf("stdoutBytes %d stderrBytes %d, output %q", o.res.StdoutBytes, o.res.StderrBytes, o.stdout)
	}
	if o.res.ArtifactPath != ".toolgate/executions/exec-1/output.log" {
		t.Errorf("artifactPath %q", o.res.ArtifactPath)
	}
	if got := readFile(t, filepath.Join(ws, ".toolgate/.gitignore")); got != "*\n" {
		t.Errorf(".toolgate/.gitignore = %q", got)
	}
	if o.res.UID != os.Getuid() {
		t.Errorf("uid %d, want %d", o.res.UID, os.Getuid())
	}
	_, probeErr := os.CreateTemp("/", ".runner-test-probe-*")
	if probeErr == nil {
		matches, _ := filepath.Glob("/.runner-test-probe-*")
		for _, m := range matches {
			_ = os.Remove(m)
		}
	}
	if o.res.ReadOnlyRoot != (probeErr != nil) {
		t.Errorf("readOnlyRoot %v, but creating a file in / gave %v", o.res.ReadOnlyRoot, probeErr)
	}
}

// The command's exit code is in the Result; the runner itself exits ExitFailed, a
// code no signal or crash produces.
func TestBashExitCodeIsInTheResult(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	o := invoke(t, ws, "bash", map[string]any{"command": "echo failing; exit 7"}, nil)
	expectKind(t, o, protocol.KindExitCode, "exited with code 7")
	if o.res.ExitCode != 7 || o.exitCode != protocol.ExitFailed || string(o.stdout) != "failing\n" {
		t.Fatalf("result exit code %d, runner exit %d, output %q", o.res.ExitCode, o.exitCode, o.stdout)
	}
}

func TestBashEnvironmentIsMinimal(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	o := invoke(t, ws, "bash", map[string]any{"command": "env"},
		func(inv *protocol.Invocation) { inv.Env = map[string]string{"GREETING": "hello world"} },
		invokeOpts{env: []string{"RUNNER_SECRET=s3cr3t", protocol.NodeIPEnv + "=127.0.0.1"}})
	env := string(o.stdout)
	for _, want := range []string{"GREETING=hello world\n", "HOME=/", "LANG=C.UTF-8\n", "PATH=" + os.Getenv("PATH") + "\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	for _, leak := range []string{"RUNNER_SECRET", "KUBERNETES_SERVICE_HOST", protocol.NodeIPEnv, protocol.InvocationEnv} {
		if strings.Contains(env, leak) {
			t.Errorf("env leaks %s:\n%s", leak, env)
		}
	}
}

func TestBashWorkdir(t *testing.T) {
	ws, outside := newWorkspace(t, map[string]string{"sub/dir/f.txt": "x"})
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	o := invoke(t, ws, "bash", map[string]any{"command": "pwd"}, func(inv *protocol.Invocation) { inv.Workdir = "sub/dir" })
	if got := strings.TrimSpace(string(o.stdout)); got != filepath.Join(ws, "sub/dir") {
		t.Errorf("pwd = %q", got)
	}
	o = invoke(t, ws, "bash", map[string]any{"command": "pwd", "workdir": ws + "/sub"}, nil)
	if got := strings.TrimSpace(string(o.stdout)); got != filepath.Join(ws, "sub") {
		t.Errorf("pwd with input workdir = %q", got)
	}
	for _, wd := range []string{"..", "sub/../..", "out", outside, "missing"} {
		o := invoke(t, ws, "bash", map[string]any{"command": "touch ran"}, func(inv *protocol.Invocation) { inv.Workdir = wd })
		if o.res.ErrorKind != protocol.KindException {
			t.Errorf("workdir %q: errorKind %q, want Exception", wd, o.res.ErrorKind)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "ran")); err == nil {
		t.Error("a command ran outside the workspace")
	}
}

// alive reports whether pid is a live process; a zombie waiting to be reaped is dead.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name.
	s := string(stat)
	return !strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z")
}

func readPid(t *testing.T, p string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, p)))
	if err != nil {
		t.Fatalf("pid file %s: %v", p, err)
	}
	return pid
}

func TestBashTimeoutKillsTheProcessTree(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	// A child that ignores SIGTERM and a sleeping grandchild under it, plus a
	// background sleep of the shell itself.
	// The pid files are written whole (renamed into place), and the shell says
	// started only once all are there, so a slow machine's timeout cannot cut one.
	command := `sh -c 'trap "" TERM; sleep 300 & echo $! > grandchild.tmp; mv grandchild.tmp grandchild.pid; echo $$ > child.tmp; mv child.tmp child.pid; while :; do sleep 1; done' &
sleep 300 & echo $! > sleeper.tmp; mv sleeper.tmp sleeper.pid
while [ ! -e child.pid ] || [ ! -e grandchild.pid ]; do sleep 0.01; done
echo started
wait`
	o := invoke(t, ws, "bash", map[string]any{"command": command, "timeoutMs": 3000}, nil)
	expectKind(t, o, protocol.KindTimeout, "timed out after 3s")
	if o.res.ExitCode != protocol.TimeoutExitCode || o.exitCode != protocol.ExitFailed {
		t.Fatalf("result exit code %d, runner exit code %d; want %d and %d", o.res.ExitCode, o.exitCode, protocol.TimeoutExitCode, protocol.ExitFailed)
	}
	if string(o.stdout) != "started\n" {
		t.Errorf("output %q", o.stdout)
	}
	for _, name := range []string{"child.pid", "grandchild.pid", "sleeper.pid"} {
		pid := readPid(t, filepath.Join(ws, name))
		deadline := time.Now().Add(5 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("%s (pid %d) survived the timeout", name, pid)
		}
	}
}

func TestRunnerTerminatedBySignalStillReports(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	o := invoke(t, ws, "bash", map[string]any{"command": "echo $$ > shell.tmp; mv shell.tmp shell.pid; sleep 300"}, nil, invokeOpts{
		whileRun: func(cmd *exec.Cmd) {
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := os.Stat(filepath.Join(ws, "shell.pid")); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
		},
	})
	expectKind(t, o, protocol.KindTimeout, "runner was terminated")
	if pid := readPid(t, filepath.Join(ws, "shell.pid")); alive(pid) {
		t.Errorf("the shell (pid %d) outlived the runner", pid)
	}
}

func TestBashOutputFloodIsCappedFlaggedAndHashed(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	const size = 50 << 20
	o := invoke(t, ws, "bash", map[string]any{"command": fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a; echo tail >&2", size)},
		func(inv *protocol.Invocation) { inv.MaxOutputBytes = 4096 })
	if o.res.ErrorKind != "" {
		t.Fatalf("result %+v", o.res)
	}
	if o.res.StdoutBytes != size || o.res.StderrBytes != 5 || int64(len(o.stdout)) != size+5 {
		t.Fatalf("stdoutBytes %d stderrBytes %d, printed %d", o.res.StdoutBytes, o.res.StderrBytes, len(o.stdout))
	}
	if !o.res.Truncated {
		t.Fatal("50 MB of output with maxOutputBytes 4096 is not flagged truncated")
	}
	// invoke already compared outputSHA256 and the artifact with the printed bytes.
}

func TestBashTruncatedIsExactlyMoreThanMaxOutputBytes(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	for _, tc := range []struct {
		stdout, stderr int
		want           bool
	}{
		{stdout: 256, stderr: 0, want: false},
		{stdout: 200, stderr: 56, want: false},
		{stdout: 200, stderr: 57, want: true},
		{stdout: 257, stderr: 0, want: true},
	} {
		cmd := fmt.Sprintf("head -c %d /dev/zero; head -c %d /dev/zero >&2", tc.stdout, tc.stderr)
		o := invoke(t, ws, "bash", map[string]any{"command": cmd}, func(inv *protocol.Invocation) { inv.MaxOutputBytes = 256 })
		if o.res.Truncated != tc.want {
			t.Errorf("%d+%d bytes with maxOutputBytes 256: truncated %v, want %v", tc.stdout, tc.stderr, o.res.Truncated, tc.want)
		}
	}
}

func TestReadFile(t *testing.T) {
	var lines strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&lines, "line %d\n", i)
	}
	content := lines.String()
	ws, _ := newWorkspace(t, map[string]string{"a.txt": content, "bin.dat": "PNG\x00\x01\x02", "noeol.txt": "one\ntwo"})

	o := invoke(t, ws, "read_file", map[string]any{"path": "a.txt", "offset": 3, "limit": 2}, nil)
	want := "     3\tline 3\n     4\tline 4\n[showing lines 3-4 of 10; read on with offset=5]\n"
	if string(o.stdout) != want {
		t.Errorf("output %q, want %q", o.stdout, want)
	}
	if o.res.ContentSHA256 != sha256Hex([]byte(content)) {
		t.Errorf("contentSHA256 %s is not the whole file's hash", o.res.ContentSHA256)
	}

	o = invoke(t, ws, "read_file", map[string]any{"path": filepath.Join(ws, "noeol.txt")}, nil)
	if string(o.stdout) != "     1\tone\n     2\ttwo\n" {
		t.Errorf("absolute path inside the workspace: output %q", o.stdout)
	}

	o = invoke(t, ws, "read_file", map[string]any{"path": "bin.dat"}, nil)
	if !o.res.Binary || strings.Contains(string(o.stdout), "PNG") || !strings.Contains(string(o.stdout), "binary file") {
		t.Errorf("binary file: binary %v, output %q", o.res.Binary, o.stdout)
	}
	if o.res.ContentSHA256 != sha256Hex([]byte("PNG\x00\x01\x02")) {
		t.Errorf("binary contentSHA256 %s", o.res.ContentSHA256)
	}

	o = invoke(t, ws, "read_file", map[string]any{"path": "a.txt", "offset": 20}, nil)
	if !strings.Contains(string(o.stdout), "offset 20 is past the end: the file has 10 lines") {
		t.Errorf("offset past the end: %q", o.stdout)
	}

	expectKind(t, invoke(t, ws, "read_file", map[string]any{"path": "missing.txt"}, nil), protocol.KindException, `"missing.txt" does not exist`)
	expectKind(t, invoke(t, ws, "read_file", map[string]any{"path": "."}, nil), protocol.KindException, "is a directory")
	expectKind(t, invoke(t, ws, "read_file", map[string]any{"path": ""}, nil), protocol.KindException, "path of read_file is empty")
	expectKind(t, invoke(t, ws, "read_file", map[string]any{"path": "a.txt", "offset": -1}, nil), protocol.KindException, "must not be negative")
	expectKind(t, invoke(t, ws, "read_file", map[string]any{"path": "a.txt", "lines": 3}, nil), protocol.KindException, `unknown field "lines"`)
}

// escapes are paths that leave the workspace; each test adds the symlinks they use.
func escapes(t *testing.T, ws, outside string) []string {
	t.Helper()
	for link, dest := range map[string]string{
		"link-out-file": filepath.Join(outside, "secret.txt"),
		"link-out-dir":  outside,
		"link-rel-out":  "../outside/secret.txt",
		"sub/link-up":   "../../outside",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, link)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dest, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	return []string{
		"../outside/secret.txt",
		"sub/../../outside/secret.txt",
		filepath.Join(outside, "secret.txt"),
		"/etc/passwd",
		"link-out-file",
		"link-out-dir/secret.txt",
		"link-rel-out",
		"sub/link-up/secret.txt",
	}
}

func TestEscapesAreRefused(t *testing.T) {
	ws, outside := newWorkspace(t, map[string]string{"a.txt": "inside\n"})
	paths := escapes(t, ws, outside)
	before, beforeOut := snapshot(t, ws), snapshot(t, outside)
	secretHash := sha256Hex([]byte("secret\n"))
	for _, p := range paths {
		t.Run(strings.ReplaceAll(p, "/", "|"), func(t *testing.T) {
			o := invoke(t, ws, "read_file", map[string]any{"path": p}, nil)
			expectKind(t, o, protocol.KindException, "outside the workspace")
			if strings.Contains(string(o.stdout), "secret") {
				t.Errorf("read_file printed the outside file: %q", o.stdout)
			}
			o = invoke(t, ws, "write_file", map[string]any{"path": p, "content": "pwned\n"}, nil)
			if o.res.ErrorKind != protocol.KindException {
				t.Errorf("write_file: errorKind %q (%s)", o.res.ErrorKind, o.res.Message)
			}
			// The baseline is the outside file's real hash, so only the
			// confinement can stop this edit.
			o = invoke(t, ws, "edit_file", map[string]any{"path": p, "oldText": "secret", "newText": "pwned"},
				func(inv *protocol.Invocation) { inv.BaselineSHA256 = secretHash })
			if o.res.ErrorKind != protocol.KindException {
				t.Errorf("edit_file: errorKind %q (%s)", o.res.ErrorKind, o.res.Message)
			}
			o = invoke(t, ws, "list_dir", map[string]any{"path": filepath.Dir(p)}, nil)
			if filepath.Dir(p) != "." && filepath.Dir(p) != "sub" && o.res.ErrorKind != protocol.KindException {
				t.Errorf("list_dir %s: errorKind %q, output %q", filepath.Dir(p), o.res.ErrorKind, o.stdout)
			}
		})
	}
	sameSnapshot(t, before, snapshot(t, ws))
	sameSnapshot(t, beforeOut, snapshot(t, outside))
}

func TestWriteFile(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{"old.txt": "a\nb\nc\n"})
	o := invoke(t, ws, "write_file", map[string]any{"path": "new/deep/f.txt", "content": "one\ntwo\n"}, nil)
	if o.res.ErrorKind != "" {
		t.Fatalf("result %+v", o.res)
	}
	if got := readFile(t, filepath.Join(ws, "new/deep/f.txt")); got != "one\ntwo\n" {
		t.Errorf("content %q", got)
	}
	if o.res.ContentSHA256 != sha256Hex([]byte("one\ntwo\n")) || o.res.LinesAdded != 2 || o.res.LinesRemoved != 0 {
		t.Errorf("facts %+v", o.res)
	}

	// Overwrite with the right baseline: the lines that changed are counted.
	o = invoke(t, ws, "write_file", map[string]any{"path": "old.txt", "content": "a\nB\nc\nd\n"},
		func(inv *protocol.Invocation) { inv.BaselineSHA256 = sha256Hex([]byte("a\nb\nc\n")) })
	if o.res.ErrorKind != "" || o.res.LinesAdded != 2 || o.res.LinesRemoved != 1 {
		t.Fatalf("overwrite: %+v", o.res)
	}
	if got := readFile(t, filepath.Join(ws, "old.txt")); got != "a\nB\nc\nd\n" {
		t.Errorf("content %q", got)
	}

	// A stale baseline writes nothing.
	before := snapshot(t, ws)
	o = invoke(t, ws, "write_file", map[string]any{"path": "old.txt", "content": "lost\n"},
		func(inv *protocol.Invocation) { inv.BaselineSHA256 = sha256Hex([]byte("a\nb\nc\n")) })
	expectKind(t, o, protocol.KindStale, "changed since it was read")
	o = invoke(t, ws, "write_file", map[string]any{"path": "gone.txt", "content": "x"},
		func(inv *protocol.Invocation) { inv.BaselineSHA256 = sha256Hex([]byte("x")) })
	expectKind(t, o, protocol.KindStale, "no longer exists")
	// BaselineAbsent creates, but never overwrites a file the task has not read.
	o = invoke(t, ws, "write_file", map[string]any{"path": "old.txt", "content": "unseen overwrite\n"},
		func(inv *protocol.Invocation) { inv.BaselineSHA256 = protocol.BaselineAbsent })
	expectKind(t, o, protocol.KindStale, "exists and this task has not read it")
	if err := os.Symlink("old.txt", filepath.Join(ws, "alias.txt")); err != nil {
		t.Fatal(err)
	}
	before["alias.txt"] = "-> old.txt"
	expectKind(t, invoke(t, ws, "write_file", map[string]any{"path": "alias.txt", "content": "x"}, nil), protocol.KindException, "is a symlink")
	expectKind(t, invoke(t, ws, "write_file", map[string]any{"path": "new", "content": "x"}, nil), protocol.KindException, "is a directory")
	expectKind(t, invoke(t, ws, "write_file", map[string]any{"path": ws, "content": "x"}, nil), protocol.KindException, "names the workspace itself")
	sameSnapshot(t, before, snapshot(t, ws))

	o = invoke(t, ws, "write_file", map[string]any{"path": "fresh.txt", "content": "new\n"},
		func(inv *protocol.Invocation) { inv.BaselineSHA256 = protocol.BaselineAbsent })
	if o.res.ErrorKind != "" || readFile(t, filepath.Join(ws, "fresh.txt")) != "new\n" {
		t.Fatalf("create with BaselineAbsent: %+v", o.res)
	}
}

func TestEditFile(t *testing.T) {
	original := "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n"
	ws, _ := newWorkspace(t, map[string]string{"main.go": original, "dup.txt": "x = 1\nx = 1\n", "aaa.txt": "aaa\n"})
	baseline := func(content string) func(*protocol.Invocation) {
		return func(inv *protocol.Invocation) { inv.BaselineSHA256 = sha256Hex([]byte(content)) }
	}

	o := invoke(t, ws, "edit_file", map[string]any{"path": "main.go", "oldText": "println(\"hi\")", "newText": "println(\"hello\")\n\tprintln(\"world\")"}, baseline(original))
	if o.res.ErrorKind != "" {
		t.Fatalf("result %+v", o.res)
	}
	want := "package main\n\nfunc main() {\n\tprintln(\"hello\")\n\tprintln(\"world\")\n}\n"
	if got := readFile(t, filepath.Join(ws, "main.go")); got != want {
		t.Fatalf("content %q", got)
	}
	wantDiff := "--- a/main.go\n+++ b/main.go\n@@ -1,5 +1,6 @@\n package main\n \n func main() {\n-\tprintln(\"hi\")\n+\tprintln(\"hello\")\n+\tprintln(\"world\")\n }\n"
	if string(o.stdout) != wantDiff {
		t.Errorf("diff %q, want %q", o.stdout, wantDiff)
	}
	if o.res.LinesAdded != 2 || o.res.LinesRemoved != 1 || o.res.ContentSHA256 != sha256Hex([]byte(want)) {
		t.Errorf("facts %+v", o.res)
	}

	before := snapshot(t, ws)
	// The file changed since the baseline (the edit above): Stale.
	expectKind(t, invoke(t, ws, "edit_file", map[string]any{"path": "main.go", "oldText": "main", "newText": "x"}, baseline(original)),
		protocol.KindStale, "changed since it was read")
	expectKind(t, invoke(t, ws, "edit_file", map[string]any{"path": "dup.txt", "oldText": "x = 1", "newText": "x = 2"}, baseline("x = 1\nx = 1\n")),
		protocol.KindException, "occurs 2 times")
	expectKind(t, invoke(t, ws, "edit_file", map[string]any{"path": "aaa.txt", "oldText": "aa", "newText": "b"}, baseline("aaa\n")),
		protocol.KindException, "occurs 2 times")
	expectKind(t, invoke(t, ws, "edit_file", map[string]any{"path": "main.go", "oldText": "println(\"bye\")", "newText": "x"}, baseline(want)),
		protocol.KindException, "oldText was not found")
	expectKind(t, invoke(t, ws, "edit_file", map[string]any{"path": "main.go", "oldText": "main", "newText": "x"}, nil),
		protocol.KindException, "needs baselineSHA256")
	expectKind(t, invoke(t, ws, "edit_file", map[string]any{"path": "main.go", "oldText": "", "newText": "x"}, baseline(want)),
		protocol.KindException, "oldText of edit_file is empty")
	expectKind(t, invoke(t, ws, "edit_file", map[string]any{"path": "nope.go", "oldText": "a", "newText": "b"}, baseline(want)),
		protocol.KindStale, "no longer exists")
	sameSnapshot(t, before, snapshot(t, ws))
}

func TestGlob(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{
		"main.go": "", "pkg/a.go": "", "pkg/a_test.go": "", "pkg/deep/b.go": "", "README.md": "",
		".git/config.go": "", "docs/x.md": "",
	})
	o := invoke(t, ws, "glob", map[string]any{"pattern": "**/*.go"}, nil)
	if want := "main.go\npkg/a.go\npkg/a_test.go\npkg/deep/b.go\n"; string(o.stdout) != want || o.res.Matches != 4 {
		t.Errorf("**/*.go: output %q (matches %d), want %q", o.stdout, o.res.Matches, want)
	}
	o = invoke(t, ws, "glob", map[string]any{"pattern": "*.go", "path": "pkg"}, nil)
	if want := "pkg/a.go\npkg/a_test.go\n"; string(o.stdout) != want {
		t.Errorf("*.go in pkg: output %q, want %q", o.stdout, want)
	}
	o = invoke(t, ws, "glob", map[string]any{"pattern": "*"}, nil)
	if want := "README.md\ndocs/\nmain.go\npkg/\n"; string(o.stdout) != want {
		t.Errorf("*: output %q, want %q", o.stdout, want)
	}
	o = invoke(t, ws, "glob", map[string]any{"pattern": "**/*.rs"}, nil)
	if o.res.Matches != 0 || !strings.Contains(string(o.stdout), "no paths match") {
		t.Errorf("no match: %q", o.stdout)
	}
	expectKind(t, invoke(t, ws, "glob", map[string]any{"pattern": "[a-"}, nil), protocol.KindException, "malformed")
	expectKind(t, invoke(t, ws, "glob", map[string]any{"pattern": "*", "path": ".."}, nil), protocol.KindException, "outside the workspace")

	many := map[string]string{}
	for i := range 1005 {
		many[fmt.Sprintf("many/f%04d.txt", i)] = ""
	}
	ws2, _ := newWorkspace(t, many)
	o = invoke(t, ws2, "glob", map[string]any{"pattern": "many/*.txt"}, nil)
	if !o.res.ResultsCapped || o.res.Matches != 1000 || !strings.Contains(string(o.stdout), "results capped at 1000") {
		t.Errorf("cap: capped %v matches %d", o.res.ResultsCapped, o.res.Matches)
	}
}

func TestGrep(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{
		"a.go":           "package a\nfunc Foo() {}\n// TODO: foo\n",
		"sub/b.txt":      "nothing\nFoo bar\n",
		"bin.dat":        "Foo\x00binary",
		".git/HEAD":      "Foo in git\n",
		".toolgate/x":    "Foo in toolgate\n",
		"sub/c.go":       "var Foo = 1\n",
		"sub/long.txt":   strings.Repeat("x", 1000) + "Foo\n",
		"other/skip.txt": "foo\n",
	})
	o := invoke(t, ws, "grep", map[string]any{"pattern": `Foo\b`}, nil)
	want := "a.go:2:func Foo() {}\nsub/b.txt:2:Foo bar\nsub/c.go:1:var Foo = 1\nsub/long.txt:1:" + strings.Repeat("x", 500) + " …[line cut]\n[skipped 1 binary files]\n"
	if string(o.stdout) != want || o.res.Matches != 4 {
		t.Errorf("output %q (matches %d), want %q", o.stdout, o.res.Matches, want)
	}
	o = invoke(t, ws, "grep", map[string]any{"pattern": `(?i)foo`, "include": "*.go"}, nil)
	if want := "a.go:2:func Foo() {}\na.go:3:// TODO: foo\nsub/c.go:1:var Foo = 1\n"; string(o.stdout) != want {
		t.Errorf("include *.go: output %q, want %q", o.stdout, want)
	}
	o = invoke(t, ws, "grep", map[string]any{"pattern": `Foo`, "path": "sub/b.txt"}, nil)
	if want := "sub/b.txt:2:Foo bar\n"; string(o.stdout) != want {
		t.Errorf("single file: output %q", o.stdout)
	}
	o = invoke(t, ws, "grep", map[string]any{"pattern": `Foo`, "maxResults": 2}, nil)
	if !o.res.ResultsCapped || o.res.Matches != 2 || !strings.Contains(string(o.stdout), "results capped at 2") {
		t.Errorf("cap: capped %v matches %d output %q", o.res.ResultsCapped, o.res.Matches, o.stdout)
	}
	o = invoke(t, ws, "grep", map[string]any{"pattern": `nomatch`}, nil)
	if o.res.ErrorKind != "" || !strings.Contains(string(o.stdout), "no lines match") {
		t.Errorf("no match: %+v %q", o.res, o.stdout)
	}
	expectKind(t, invoke(t, ws, "grep", map[string]any{"pattern": `(`}, nil), protocol.KindException, "not a valid RE2")
	expectKind(t, invoke(t, ws, "grep", map[string]any{"pattern": `x`, "path": "../outside"}, nil), protocol.KindException, "outside the workspace")
}

func TestListDir(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{"b.txt": "12345", "a/x": "", "c/y": ""})
	if err := os.Symlink("b.txt", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	o := invoke(t, ws, "list_dir", map[string]any{}, func(inv *protocol.Invocation) { inv.ExecutionName = "listing" })
	// The artifact folder exists by the time the listing is taken.
	want := ".toolgate/\na/\nb.txt  (5 bytes)\nc/\nlink -> b.txt\n"
	if string(o.stdout) != want || o.res.Matches != 5 {
		t.Errorf("output %q (matches %d), want %q", o.stdout, o.res.Matches, want)
	}
	expectKind(t, invoke(t, ws, "list_dir", map[string]any{"path": "b.txt"}, nil), protocol.KindException, "is not a directory")
	expectKind(t, invoke(t, ws, "list_dir", map[string]any{"path": "missing"}, nil), protocol.KindException, "does not exist")
}

func TestReadOnlyWorkspaceSkipsTheArtifact(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{"a.txt": "hello\n"})
	var opts invokeOpts
	if os.Getuid() == 0 {
		// root writes anywhere: run the runner as nobody, as the pod does.
		opts.credential = &syscall.Credential{Uid: 65534, Gid: 65534}
		opts.termDir = t.TempDir()
		for _, d := range []string{opts.termDir, filepath.Dir(ws), filepath.Dir(filepath.Dir(ws))} {
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Chmod(ws, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(ws, 0o755) })
	o := invoke(t, ws, "read_file", map[string]any{"path": "a.txt"}, nil, opts)
	if o.res.ErrorKind != "" || string(o.stdout) != "     1\thello\n" {
		t.Fatalf("result %+v, output %q", o.res, o.stdout)
	}
	if o.res.ArtifactPath != "" || !strings.Contains(o.res.ArtifactSkipped, "not writable") {
		t.Errorf("artifactPath %q, artifactSkipped %q", o.res.ArtifactPath, o.res.ArtifactSkipped)
	}
	if opts.credential != nil && o.res.UID != 65534 {
		t.Errorf("uid %d, want 65534", o.res.UID)
	}
	if _, err := os.Stat(filepath.Join(ws, ".toolgate")); err == nil {
		t.Error(".toolgate was created in a read-only workspace")
	}
	expectKind(t, invoke(t, ws, "write_file", map[string]any{"path": "b.txt", "content": "x"}, nil, opts), protocol.KindException, "permission denied")
}

func TestBadInvocationsStillReportValidJSON(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	for name, tc := range map[string]struct {
		invocation string
		msgPart    string
	}{
		"missing":           {"", "TOOLGATE_INVOCATION is empty or unset"},
		"not json":          {"{not json", "is not valid"},
		"unknown field":     {`{"executionName":"e","tool":"bash","input":{},"timeoutSeconds":1,"maxOutputBytes":1,"extra":1}`, `unknown field "extra"`},
		"unknown tool":      {`{"executionName":"e","tool":"rm_rf","input":{},"timeoutSeconds":1,"maxOutputBytes":1}`, `tool "rm_rf" is not a built-in tool`},
		"bad name":          {`{"executionName":"../x","tool":"bash","input":{},"timeoutSeconds":1,"maxOutputBytes":1}`, "not a valid Execution name"},
		"no timeout":        {`{"executionName":"e","tool":"bash","input":{},"timeoutSeconds":0,"maxOutputBytes":1}`, "timeoutSeconds must be positive"},
		"huge message path": {`{"executionName":"e","tool":"read_file","input":{"path":"/` + strings.Repeat("\u00e9\\u0001<", 3000) + `"},"timeoutSeconds":1,"maxOutputBytes":1}`, "[message trimmed]"},
	} {
		t.Run(name, func(t *testing.T) {
			o := invokeRaw(t, ws, tc.invocation, invokeOpts{})
			expectKind(t, o, protocol.KindException, tc.msgPart)
			if o.res.ExitCode != 1 || o.exitCode != protocol.ExitFailed {
				t.Errorf("result exit code %d, runner exit code %d; want 1 and %d", o.res.ExitCode, o.exitCode, protocol.ExitFailed)
			}
		})
	}
}

// A call's HOME is an empty folder made for it outside the workspace, and gone when
// the call ended: configuration an earlier call wrote into the workspace (a
// .gitconfig with an alias that runs a program, a pager, a user) is never read as
// the home's.
func TestBashHomeIsPrivateToTheCall(t *testing.T) {
	tmp := t.TempDir()
	pwned := filepath.Join(tmp, "pwned")
	ws, _ := newWorkspace(t, map[string]string{
		".gitconfig":         "[user]\n\tname = planted\n[alias]\n\tx = !touch " + pwned + "\n[core]\n\tpager = touch " + pwned + "\n[url \"https://evil.example/\"]\n\tinsteadOf = https://github.com/\n",
		".config/git/config": "[user]\n\temail = planted@example.com\n",
		"repo/README":        "hi\n",
	})
	command := `printf 'home=%s\n' "$HOME"; stat -c 'mode=%a' "$HOME"; ls -A "$HOME" | wc -l;
env | grep -E '^(XDG_[A-Z_]+|GIT_CONFIG_NOSYSTEM)=' | sort;
printf 'user=%s\n' "$(git config --get user.name)"; printf 'email=%s\n' "$(git config --get user.email)";
printf 'url=%s\n' "$(git config --get-regexp '^url\.' )"; git x 2>/dev/null; echo "alias exit $?";
cd repo && git init -q . && git -c core.pager= log -1 2>/dev/null; git --paginate status >/dev/null 2>&1; true`
	o := invoke(t, ws, "bash", map[string]any{"command": command}, nil,
		invokeOpts{env: []string{"TMPDIR=" + tmp}})
	if o.res.ErrorKind != "" {
		t.Fatalf("result %+v, output %s", o.res, o.stdout)
	}
	out := string(o.stdout)
	home := ""
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "home="); ok {
			home = v
		}
	}
	if home == "" || !strings.HasPrefix(home, tmp+"/") {
		t.Fatalf("HOME %q is not a folder of its own under the runner's temporary folder %s:\n%s", home, tmp, out)
	}
	for _, want := range []string{
		"mode=700\n0\n",
		"XDG_CACHE_HOME=" + home + "/.cache\n", "XDG_CONFIG_HOME=" + home + "/.config\n",
		"XDG_DATA_HOME=" + home + "/.local/share\n", "XDG_STATE_HOME=" + home + "/.local/state\n",
		"GIT_CONFIG_NOSYSTEM=1\n",
		"user=\n", "email=\n", "url=\n", "alias exit 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Errorf("git ran a program the workspace's .gitconfig named")
	}
	if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the call's HOME %s is still there after the call (%v)", home, err)
	}
}

// The call's HOME goes when the call is killed at its timeout, too.
func TestBashHomeIsRemovedAfterATimeout(t *testing.T) {
	tmp := t.TempDir()
	ws, _ := newWorkspace(t, nil)
	o := invoke(t, ws, "bash", map[string]any{"command": `touch "$HOME/left"; echo "$HOME" > home.txt; sleep 300`, "timeoutMs": 500}, nil,
		invokeOpts{env: []string{"TMPDIR=" + tmp}})
	expectKind(t, o, protocol.KindTimeout, "timed out")
	home := strings.TrimSpace(readFile(t, filepath.Join(ws, "home.txt")))
	if !strings.HasPrefix(home, tmp+"/") {
		t.Fatalf("HOME %q is not under %s", home, tmp)
	}
	if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the call's HOME %s is still there after its timeout (%v)", home, err)
	}
}

// The invocation's environment cannot take back the call's home or point git, curl
// or npm at configuration in the workspace.
func TestBashEnvCannotSetTheHome(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	for _, name := range []string{"HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_COUNT", "CURL_HOME", "npm_config_userconfig", "BASH_ENV", "GIT_SSH_COMMAND"} {
		t.Run(name, func(t *testing.T) {
			o := invoke(t, ws, "bash", map[string]any{"command": "touch ran"},
				func(inv *protocol.Invocation) { inv.Env = map[string]string{name: ws} })
			expectKind(t, o, protocol.KindException, name)
			if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
				t.Error("the command ran")
			}
		})
	}
}

// A call whose walls say NoOutputCopy (a Result rule may act on its output) leaves no
// copy of the output in the workspace for a later call to read; the output still
// goes to the container log, whole, and the Result says why there is no copy.
func TestNoOutputCopyLeavesNoArtifact(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{"a.txt": "hello\n"})
	o := invoke(t, ws, "bash", map[string]any{"command": "cat a.txt; echo done > b.txt"}, func(inv *protocol.Invocation) {
		inv.Walls.NoOutputCopy = true
	})
	if o.res.ErrorKind != "" || string(o.stdout) != "hello\n" {
		t.Fatalf("result %+v, output %q", o.res, o.stdout)
	}
	if o.res.ArtifactPath != "" || !strings.Contains(o.res.ArtifactSkipped, "Result rule") {
		t.Errorf("artifactPath %q, artifactSkipped %q", o.res.ArtifactPath, o.res.ArtifactSkipped)
	}
	if _, err := os.Stat(filepath.Join(ws, ".toolgate")); !os.IsNotExist(err) {
		t.Errorf(".toolgate exists (%v): the output was copied into the workspace", err)
	}
	// The workspace stays writable for the call itself.
	if got := readFile(t, filepath.Join(ws, "b.txt")); got != "done\n" {
		t.Errorf("b.txt = %q", got)
	}
}
