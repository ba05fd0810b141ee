// Package leakcheck ends a test package's run with a check that its tests left
// nothing behind: no process they started still running, no file or folder in the
// temporary directory. A package's TestMain wraps its run with Main.
//
// The tests run with a temporary directory of their own (TMPDIR, so t.TempDir and
// os.MkdirTemp land there) and a marker in their environment (MarkerEnv). A
// process is the tests' when its command line, executable or working directory
// lies under that directory (a binary built there, a tool run in a workspace made
// there), or when its environment carries the marker (a process started with the
// test's environment, and whatever it started with its own).
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MarkerEnv is set to the run's temporary directory in the test process's
// environment, which every process started with that environment inherits.
const MarkerEnv = "TOOLGATE_TEST_RUN"

// settle bounds how long the check waits for processes that are ending (killed by
// a test's cleanup a moment ago, not yet reaped) to be gone.
const settle = 10 * time.Second

// Main runs run (a package's m.Run, or what wraps it) with a temporary directory
// of its own, and returns its exit code, or 1 when a process the tests started is
// still running once they ended, or when they left something in the temporary
// directory. Every survivor is named on stderr and killed, and the directory is
// removed, so that a failed run leaves nothing behind either.
func Main(run func() int) int {
	root, err := os.MkdirTemp("", "toolgate-test-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
		return 1
	}
	// Tests run processes as other users too (nobody), which must reach the folders
	// made for them below root.
	if err := os.Chmod(root, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
		return 1
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(root) }()
	for name, value := range map[string]string{"TMPDIR": root, MarkerEnv: root} {
		if err := os.Setenv(name, value); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
			return 1
		}
	}

	code := run()

	if left := survivors(root, settle); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "leakcheck: FAIL: %d process(es) the tests started are still running after them (killed now):\n", len(left))
		for _, p := range left {
			fmt.Fprintf(os.Stderr, "  pid %d: %s\n", p.pid, p.cmdline)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		code = 1
	}
	if left := leftovers(root); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "leakcheck: FAIL: the tests left %s in the temporary directory (removed now)\n", strings.Join(left, ", "))
		code = 1
	}
	return code
}

// process is a survivor: its pid and command line.
type process struct {
	pid     int
	cmdline string
}

// survivors lists the processes of the tests under root that are still running,
// waiting up to within for those that are ending.
func survivors(root string, within time.Duration) []process {
	deadline := time.Now().Add(within)
	for {
		left := scan(root)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scan reads /proc for the live processes of the tests under root, but this one.
func scan(root string) []process {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	marker := []byte(MarkerEnv + "=" + root + "\x00")
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		if !live(dir) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		environ, _ := os.ReadFile(filepath.Join(dir, "environ"))
		exe, _ := os.Readlink(filepath.Join(dir, "exe"))
		cwd, _ := os.Readlink(filepath.Join(dir, "cwd"))
		if bytes.Contains(cmdline, []byte(root)) || bytes.Contains(environ, marker) || under(exe, root) || under(cwd, root) {
			out = append(out, process{pid: pid, cmdline: strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// live says whether the process of /proc dir runs: a zombie (ended, not reaped)
// does not.
func live(dir string) bool {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	fields := strings.Fields(string(stat[i+1:]))
	return i >= 0 && len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// under says whether path lies in root (a deleted executable keeps its path).
func under(path, root string) bool {
	return path == root || strings.HasPrefix(path, root+"/")
}

// leftovers names what is left in root.
func leftovers(root string) []string {
	entries, _ := os.ReadDir(root)
	var names []string
	for _, e := range entries {
		names = append(names, filepath.Join(root, e.Name()))
	}
	return names
}
