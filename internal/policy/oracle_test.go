package policy

// The oracle: a command the classifier calls read-only is run in a real bash inside a
// throwaway bubblewrap sandbox over a scratch workspace of canary files, with a canary
// listener on loopback, and must leave no trace: nothing in the workspace, HOME, /tmp
// or /dev changed, nothing connected or opened a socket, no process outlived bash.
// A table of expected categories only checks what its author thought of; the oracle
// checks what bash actually does.
//
// How it runs: the test binary re-executes itself inside bwrap (the standard Go
// helper-process pattern, here an init function keyed on an environment variable).
// Inside, that supervisor is the only process besides bwrap's pid-1 init in a fresh
// pid and network namespace: it brings up the listeners, runs `bash -c CMD` with a
// timeout, looks for oracleSurvivors in /proc once bash has exited, and reports as JSON on
// stdout. Outside, the test compares the scratch trees before and after.

import (
	tarfmt "archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	stdnet "net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

const (
	// oracleSupervisorEnv, when set, turns the test binary into the in-sandbox supervisor.
	oracleSupervisorEnv = "TOOLGATE_ORACLE_SUPERVISOR"
	// oracleCanaryPort is where the canary TCP and UDP listeners wait, on 127.0.0.1 inside
	// the sandbox's own network namespace. Corpus lines that use the network aim here.
	oracleCanaryPort = 7777
	// oracleCommandTimeout bounds one bash run; a command still running then is killed, which
	// is not by itself a violation (a dangerous effect shows in the trees or sockets).
	oracleCommandTimeout = 2 * time.Second

	oracleWorkspace = "/workspace"
	oracleHome      = "/home/agent"
	oracleDir       = "/.oracle"
)

// ---------------------------------------------------------------------------------
// Corpus.

// oracleCorpusLine is one command of testdata/corpus/*.txt.
type oracleCorpusLine struct {
	file    string
	line    int
	command string
	// noexec lines are classified but never executed, not even in the sandbox.
	noexec bool
	// tty lines run with a pseudo-terminal as stdin, stdout and stderr, because the
	// program only starts its pager (where the danger is) on a terminal.
	tty bool
}

func (c oracleCorpusLine) String() string { return fmt.Sprintf("%s:%d: %q", c.file, c.line, c.command) }

const (
	oracleMarkerNoexec = "#!noexec"
	oracleMarkerTTY    = "#!tty"
)

// oracleLoadCorpus reads a corpus file in the format documented at the top of each file:
// one command per line, '#' comment lines and blank lines ignored, escapes as
// oracleUnescape reads them, and trailing markers #!noexec and #!tty.
func oracleLoadCorpus(t testing.TB, name string) []oracleCorpusLine {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "corpus", name))
	if err != nil {
		t.Fatalf("read corpus: %v", err)
	}
	var out []oracleCorpusLine
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c := oracleCorpusLine{file: name, line: i + 1}
		for {
			switch {
			case strings.HasSuffix(line, " "+oracleMarkerNoexec):
				c.noexec, line = true, strings.TrimSpace(strings.TrimSuffix(line, oracleMarkerNoexec))
				continue
			case strings.HasSuffix(line, " "+oracleMarkerTTY):
				c.tty, line = true, strings.TrimSpace(strings.TrimSuffix(line, oracleMarkerTTY))
				continue
			}
			break
		}
		c.command = oracleUnescape(line)
		out = append(out, c)
	}
	return out
}

// oracleUnescape turns a corpus line into its command: \n is a newline, \\n a
// backslash and n, and \\\n a backslash and a newline (a line continuation).
func oracleUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], `\\\n`):
			b.WriteString("\\\n")
			i += 3
		case strings.HasPrefix(s[i:], `\\n`):
			b.WriteString(`\n`)
			i += 2
		case strings.HasPrefix(s[i:], `\n`):
			b.WriteByte('\n')
			i++
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func oracleDescribe(c Classification) string {
	var parts []string
	for _, p := range c.Parts {
		parts = append(parts, fmt.Sprintf("%s=%s", p.Command, p.Category))
	}
	return fmt.Sprintf("%s [%s]", c.Category, strings.Join(parts, "; "))
}

// ---------------------------------------------------------------------------------
// The scratch tree: canary files the commands of the corpus refer to.

// oracleFixtureTime is the modification time of every canary file: in the past, so that
// git's index is never racily clean and a read-only `git status` has no reason to
// rewrite it.
var oracleFixtureTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// oracleTemplate writes the canary scratch tree (ws/, home/, tmp/) once per test; every
// sandbox run gets a copy of it.
func oracleTemplate(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	files := []struct {
		path, content string
		mode          os.FileMode
	}{
		{"ws/notes.txt", "alpha\nbeta\ngamma\n", 0o644},
		{"ws/calc.sh", "#!/bin/sh\necho $((1 + 2))\n", 0o755},
		{"ws/data.json", `{"name":"toolgate","items":[1,2,3],"nested":{"ok":true}}` + "\n", 0o644},
		{"ws/src/main.go", "package main\n\nfunc main() { println(helper()) } // TODO: flags\n", 0o644},
		{"ws/src/util.go", "package main\n\nfunc helper() string { return \"alpha\" }\n", 0o644},
		{"ws/sub/readme.md", "# sub\nalpha in a subdirectory\n", 0o644},
		{"ws/list.txt", "notes.txt\ncalc.sh\n", 0o644},
		{"ws/old.txt", "alpha\nbeta\n", 0o644},
		// Payloads the dangerous corpus points programs at; each leaves a file behind.
		{"ws/payload.sh", "#!/bin/sh\ntouch /workspace/pwned\nexec cat\n", 0o755},
		{"ws/arith.txt", "a[$(touch /workspace/pwned)]\n", 0o644},
		{"ws/script.sed", "1e touch /workspace/pwned\n", 0o644},
		{"ws/tools/cat", "#!/bin/sh\n/usr/bin/touch /workspace/pwned\n", 0o755},
		{"ws/tools/ls", "#!/bin/sh\n/usr/bin/touch /workspace/pwned\n", 0o755},
		// A directory whose glob expands to an option of sort.
		{"ws/glob/--output=owned.txt", "", 0o644},
		{"ws/glob/a.txt", "b\na\n", 0o644},
		{"home/.profile", "# canary profile\n", 0o644},
		{"home/.canary", "home canary\n", 0o600},
		{"tmp/canary.txt", "tmp canary\n", 0o644},
	}
	for _, f := range files {
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("notes.txt", filepath.Join(ws, "link-notes")); err != nil {
		t.Fatal(err)
	}
	oracleWriteTar(t, filepath.Join(ws, "archive.tar"), map[string]string{"sub/readme.md": "# sub\n", "sub/b.txt": "b\n"})

	if _, err := exec.LookPath("git"); err == nil {
		git := func(args ...string) {
			cmd := exec.Command("git", args...)
			cmd.Dir = ws
			cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
				"GIT_AUTHOR_NAME=Canary", "GIT_AUTHOR_EMAIL=canary@example.com",
				"GIT_COMMITTER_NAME=Canary", "GIT_COMMITTER_EMAIL=canary@example.com",
				"GIT_AUTHOR_DATE=2024-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2024-01-02T03:04:05Z")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		oracleSetTimes(t, root)
		git("init", "-q", "--template=", "-b", "main")
		// The copies every run gets have new inodes and ctimes; these settings keep git
		// from taking that for a change worth rewriting the index over.
		git("config", "core.checkStat", "minimal")
		git("config", "core.trustCtime", "false")
		git("add", "notes.txt", "calc.sh", "data.json", "src", "sub", "list.txt")
		git("commit", "-q", "-m", "initial import")
		if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("alpha\nbeta\ngamma\ndelta\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		oracleSetTimes(t, root)
		git("add", "notes.txt")
		git("commit", "-q", "-m", "notes: delta")
		git("tag", "v0.1")
		git("branch", "feature")
		// A change in the working tree so that git diff and git status have something
		// to show.
		if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("alpha\nbeta\ngamma\ndelta\nepsilon\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		oracleSetTimes(t, root)
		// Refresh the index now, and leave it newer than every file, so that no
		// read-only command has a reason to rewrite it.
		git("status", "--porcelain")
		return root
	}
	oracleSetTimes(t, root)
	return root
}

func oracleWriteTar(t testing.TB, path string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tarfmt.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tarfmt.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), ModTime: oracleFixtureTime, Typeflag: tarfmt.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// oracleSetTimes sets every file of the tree to oracleFixtureTime, deepest first so a directory's
// time is not bumped again by its children.
func oracleSetTimes(t testing.TB, root string) {
	t.Helper()
	var paths []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink == 0 {
			paths = append(paths, p)
		}
		return nil
	})
	for i := len(paths) - 1; i >= 0; i-- {
		if err := os.Chtimes(paths[i], oracleFixtureTime, oracleFixtureTime); err != nil {
			t.Fatal(err)
		}
	}
}

// oracleCopyTree copies src to dst keeping modes, symlinks and modification times.
func oracleCopyTree(src, dst string) error {
	var dirs []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, p)
			return os.MkdirAll(target, info.Mode().Perm())
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(target, data, info.Mode().Perm()); err != nil {
				return err
			}
			return os.Chtimes(target, info.ModTime(), info.ModTime())
		}
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		info, err := os.Stat(dirs[i])
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, dirs[i])
		if err := os.Chtimes(filepath.Join(dst, rel), info.ModTime(), info.ModTime()); err != nil {
			return err
		}
	}
	return nil
}

// oracleSnapshot maps every path of a tree to what a write could change: type, mode, size,
// modification time, content hash, symlink target.
func oracleSnapshot(root string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%s mtime=%d", info.Mode(), info.ModTime().UnixNano())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + link
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			desc += fmt.Sprintf(" size=%d sha256=%s", len(data), hex.EncodeToString(sum[:8]))
		}
		out[rel] = desc
		return nil
	})
	return out, err
}

func oracleDiff(name string, before, after map[string]string) []string {
	var out []string
	for p, b := range before {
		a, ok := after[p]
		switch {
		case ok && p == ".git" && name == "workspace" && strings.HasPrefix(a, "d") && strings.HasPrefix(b, "d"):
			// git status takes and drops .git/index.lock to refresh the index
			// opportunistically; the index itself is compared.
		case !ok:
			out = append(out, fmt.Sprintf("%s/%s deleted (was %s)", name, p, b))
		case a != b:
			out = append(out, fmt.Sprintf("%s/%s changed: %s => %s", name, p, b, a))
		}
	}
	for p, a := range after {
		if _, ok := before[p]; !ok {
			out = append(out, fmt.Sprintf("%s/%s created (%s)", name, p, a))
		}
	}
	sort.Strings(out)
	return out
}

// ---------------------------------------------------------------------------------
// The sandbox, seen from outside.

// oracleReport is what the supervisor prints.
type oracleReport struct {
	ExitCode    int      `json:"exitCode"`
	TimedOut    bool     `json:"timedOut"`
	Connections []string `json:"connections,omitempty"`
	Sockets     []string `json:"sockets,omitempty"`
	Survivors   []string `json:"oracleSurvivors,omitempty"`
	DevChanges  []string `json:"devChanges,omitempty"`
	Output      string   `json:"output,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// oracleResult is one sandbox run: the report and every violation seen.
type oracleResult struct {
	report     oracleReport
	violations []string
	took       time.Duration
}

var (
	oracleBwrapOnce sync.Once
	oracleBwrapPath string
	oracleBwrapErr  error
)

// oracleRequireSandbox fails (it never silently skips) when bubblewrap is missing or does
// not work here; only -short skips the oracle.
func oracleRequireSandbox(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("the oracle runs real sandboxes; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the oracle needs Linux namespaces")
	}
	oracleBwrapOnce.Do(func() {
		oracleBwrapPath, oracleBwrapErr = exec.LookPath("bwrap")
		if oracleBwrapErr != nil {
			oracleBwrapErr = fmt.Errorf("bubblewrap (bwrap) is not installed: run `make oracle-deps` (apt-get install bubblewrap): %w", oracleBwrapErr)
			return
		}
		out, err := exec.Command(oracleBwrapPath, append(oracleBwrapArgs(), "true")...).CombinedOutput()
		if err != nil {
			oracleBwrapErr = fmt.Errorf("bwrap cannot make a sandbox here (%v): %s", err, out)
		}
	})
	if oracleBwrapErr != nil {
		t.Fatal(oracleBwrapErr)
	}
}

// oracleBwrapArgs is the sandbox without its scratch binds: a read-only view of the system
// directories only (not the host's HOME, /tmp, /root, /work or /run), fresh /dev and
// /proc, every namespace bwrap can unshare, no capabilities, a clean environment.
func oracleBwrapArgs() []string {
	args := []string{"--tmpfs", "/"}
	for _, top := range []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"} {
		p := "/" + top
		info, err := os.Lstat(p)
		switch {
		case err != nil:
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err := os.Readlink(p); err == nil {
				args = append(args, "--symlink", link, p)
			}
		case info.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	args = append(args,
		"--dev", "/dev", "--proc", "/proc",
		"--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--new-session", "--die-with-parent", "--cap-drop", "ALL", "--clearenv",
		"--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin")
	if os.Geteuid() != 0 {
		args = append(args, "--unshare-user")
	}
	return args
}

// oracleRun runs command in a fresh sandbox over a copy of the template and reports
// every trace it left.
func oracleRun(t testing.TB, template, command string, tty bool) oracleResult {
	t.Helper()
	res, err := oracleRunErr(template, command, tty)
	if err != nil {
		t.Fatalf("oracle run of %q: %v", command, err)
	}
	return res
}

func oracleRunErr(template, command string, tty bool) (res oracleResult, err error) {
	start := time.Now()
	defer func() { res.took = time.Since(start) }()
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	scratch, err := os.MkdirTemp("", "toolgate-oracle-")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(scratch) }()
	if err := oracleCopyTree(template, filepath.Join(scratch, "tree")); err != nil {
		return res, err
	}
	cmdFile := filepath.Join(scratch, "cmd")
	if err := os.WriteFile(cmdFile, []byte(command), 0o644); err != nil {
		return res, err
	}
	trees := []struct{ name, host, inside string }{
		{"workspace", filepath.Join(scratch, "tree", "ws"), oracleWorkspace},
		{"home", filepath.Join(scratch, "tree", "home"), oracleHome},
		{"tmp", filepath.Join(scratch, "tree", "tmp"), "/tmp"},
	}
	before := map[string]map[string]string{}
	for _, tr := range trees {
		if before[tr.name], err = oracleSnapshot(tr.host); err != nil {
			return res, err
		}
	}

	args := oracleBwrapArgs()
	for _, tr := range trees {
		args = append(args, "--bind", tr.host, tr.inside)
	}
	args = append(args,
		"--ro-bind", exe, oracleDir+"/supervisor",
		"--ro-bind", cmdFile, oracleDir+"/cmd",
		"--remount-ro", "/",
		"--chdir", oracleWorkspace,
		"--setenv", oracleSupervisorEnv, "1",
		"--setenv", "HOME", oracleHome,
		"--setenv", "ORACLE_TTY", strconv.FormatBool(tty),
		oracleDir+"/supervisor")
	ctx, cancel := context.WithTimeout(context.Background(), oracleCommandTimeout+20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, oracleBwrapPath, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if err := json.Unmarshal(stdout.Bytes(), &res.report); err != nil {
		return res, fmt.Errorf("no report from the sandbox (bwrap: %v): %v\nstdout: %.2000s\nstderr: %.2000s", runErr, err, stdout.String(), stderr.String())
	}
	if res.report.Error != "" {
		return res, fmt.Errorf("supervisor: %s", res.report.Error)
	}
	for _, c := range res.report.Connections {
		res.violations = append(res.violations, "connected to the canary listener: "+c)
	}
	for _, s := range res.report.Sockets {
		res.violations = append(res.violations, "opened a socket: "+s)
	}
	for _, s := range res.report.Survivors {
		res.violations = append(res.violations, "outlived bash: "+s)
	}
	for _, d := range res.report.DevChanges {
		res.violations = append(res.violations, "changed /dev: "+d)
	}
	for _, tr := range trees {
		after, err := oracleSnapshot(tr.host)
		if err != nil {
			return res, err
		}
		res.violations = append(res.violations, oracleDiff(tr.name, before[tr.name], after)...)
	}
	return res, nil
}

func (r oracleResult) String() string {
	return fmt.Sprintf("exit %d, timed out %v\n  %s\n  output: %.600q",
		r.report.ExitCode, r.report.TimedOut, strings.Join(r.violations, "\n  "), r.report.Output)
}

// oracleJob is one command for oracleRunParallel.
type oracleJob struct {
	command string
	tty     bool
}

// oracleRunParallel runs jobs in sandboxes, a few at a time: most of a run is waiting (on
// bwrap's setup, on a command that times out), so more than one per core pays.
func oracleRunParallel(t testing.TB, template string, jobs []oracleJob) []oracleResult {
	t.Helper()
	workers := 3 * runtime.NumCPU()
	if workers < 6 {
		workers = 6
	}
	results := make([]oracleResult, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], errs[i] = oracleRunErr(template, jobs[i].command, jobs[i].tty)
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("oracle run of %q: %v", jobs[i].command, err)
		}
	}
	return results
}

// ---------------------------------------------------------------------------------
// The supervisor, inside the sandbox.

func init() {
	if os.Getenv(oracleSupervisorEnv) == "" {
		return
	}
	// Running as the in-sandbox supervisor, before the testing package parses flags.
	rep := oracleSupervise()
	out, _ := json.Marshal(rep)
	_, _ = os.Stdout.Write(append(out, '\n'))
	os.Exit(0)
}

func oracleSupervise() (rep oracleReport) {
	cmdBytes, err := os.ReadFile(oracleDir + "/cmd")
	if err != nil {
		return oracleReport{Error: err.Error()}
	}
	tty := os.Getenv("ORACLE_TTY") == "true"
	devBefore := oracleDevSnapshot()

	var mu sync.Mutex
	record := func(list *[]string, s string) {
		mu.Lock()
		defer mu.Unlock()
		if len(*list) < 20 {
			*list = append(*list, s)
		}
	}
	canary, err := oracleListenCanary(func(s string) { record(&rep.Connections, s) })
	if err != nil {
		return oracleReport{Error: err.Error()}
	}
	defer canary.close()
	// A socket that sends nothing (cat < /dev/udp/..., a refused connect) never
	// reaches a listener; polling the namespace's socket tables sees it anyway.
	seen := map[string]bool{}
	pollSockets := func() {
		for _, s := range oracleForeignSockets() {
			mu.Lock()
			fresh := !seen[s]
			seen[s] = true
			mu.Unlock()
			if fresh {
				record(&rep.Sockets, s)
			}
		}
	}
	stopPoll := make(chan struct{})
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		tick := time.NewTicker(3 * time.Millisecond)
		defer tick.Stop()
		for {
			pollSockets()
			canary.drain()
			select {
			case <-stopPoll:
				return
			case <-tick.C:
			}
		}
	}()

	bash := exec.Command("/bin/bash", "-c", string(cmdBytes))
	bash.Dir = oracleWorkspace
	bash.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + oracleHome, "LANG=C.UTF-8",
		"USER=agent", "LOGNAME=agent", "SHELL=/bin/bash"}
	var output oracleBuffer
	var master *os.File
	if tty {
		m, slave, err := oracleOpenPTY()
		if err != nil {
			return oracleReport{Error: "pty: " + err.Error()}
		}
		master = m
		defer master.Close()
		bash.Stdin, bash.Stdout, bash.Stderr = slave, slave, slave
		bash.Env = append(bash.Env, "TERM=xterm")
		bash.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		go func() { _, _ = io.Copy(&output, master) }()
		defer slave.Close()
	} else {
		// A pipe of our own, not exec's copying goroutine: Wait must return when bash
		// exits even if a survivor still holds the write end.
		r, w, err := os.Pipe()
		if err != nil {
			return oracleReport{Error: "pipe: " + err.Error()}
		}
		defer r.Close()
		defer w.Close()
		bash.Stdout, bash.Stderr = w, w
		bash.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		go func() { _, _ = io.Copy(&output, r) }()
	}
	if err := bash.Start(); err != nil {
		return oracleReport{Error: "start bash: " + err.Error()}
	}
	if f, ok := bash.Stdout.(*os.File); ok {
		f.Close() // the child has its copy
	}
	done := make(chan error, 1)
	go func() { done <- bash.Wait() }()
	// bash's exit status is in ProcessState; Wait's error only repeats it.
	select {
	case err = <-done:
	case <-time.After(oracleCommandTimeout):
		rep.TimedOut = true
		_ = syscall.Kill(-bash.Process.Pid, syscall.SIGKILL)
		err = <-done
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return oracleReport{Error: "wait for bash: " + err.Error()}
	}
	rep.ExitCode = bash.ProcessState.ExitCode()

	// Whatever is still alive now has outlived bash. After a timeout, the members of
	// bash's own process group were just killed and may not be gone yet: only what
	// left the group counts then.
	ignoreGroup := 0
	if rep.TimedOut {
		ignoreGroup = bash.Process.Pid
		time.Sleep(50 * time.Millisecond)
	}
	// A child in the middle of exiting (a process substitution bash does not wait for)
	// still shows in /proc for a moment; what is still there after a short grace has
	// outlived bash. Nothing is lost meanwhile: writes show in the trees, sockets here.
	rep.Survivors = oracleSurvivors(ignoreGroup)
	for i := 0; len(rep.Survivors) > 0 && i < 20; i++ {
		time.Sleep(5 * time.Millisecond)
		rep.Survivors = oracleSurvivors(ignoreGroup)
	}
	_ = syscall.Kill(-1, syscall.SIGKILL)

	// Let a connection made just before bash exited reach the listeners.
	time.Sleep(5 * time.Millisecond)
	close(stopPoll)
	<-pollDone
	pollSockets()
	canary.drain()
	if master != nil {
		// The output goroutine may still be reading; take what it has.
		time.Sleep(10 * time.Millisecond)
	}
	rep.DevChanges = oracleDiff("/dev", devBefore, oracleDevSnapshot())
	mu.Lock()
	defer mu.Unlock()
	rep.Output = output.String()
	rep.Connections = append([]string(nil), rep.Connections...)
	rep.Sockets = append([]string(nil), rep.Sockets...)
	return rep
}

// oracleCanary is the TCP and UDP listener pair on the canary port. Nothing waits in
// the kernel for it: drain takes, without blocking, what the kernel has queued, so the
// drain after bash exits sees every connection and datagram bash made (loopback has
// queued them by the time a send returns), however late a goroutine would have been
// scheduled on a busy machine.
type oracleCanary struct {
	tcp    stdnet.Listener
	pc     stdnet.PacketConn
	tcpRaw syscall.RawConn
	udpRaw syscall.RawConn
	record func(string)
}

func oracleListenCanary(record func(string)) (*oracleCanary, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", oracleCanaryPort)
	ln, err := stdnet.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("canary tcp listener: %w", err)
	}
	pc, err := stdnet.ListenPacket("udp", addr)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("canary udp listener: %w", err)
	}
	c := &oracleCanary{tcp: ln, pc: pc, record: record}
	if c.tcpRaw, err = ln.(*stdnet.TCPListener).SyscallConn(); err == nil {
		c.udpRaw, err = pc.(*stdnet.UDPConn).SyscallConn()
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("canary raw sockets: %w", err)
	}
	return c, nil
}

func (c *oracleCanary) close() {
	_ = c.tcp.Close()
	_ = c.pc.Close()
}

// drain records every queued datagram and every connection waiting to be accepted,
// with up to 64 bytes of what each connection sent (read for at most 100 ms, then it
// is closed so a reader on the other end sees end of file).
func (c *oracleCanary) drain() {
	buf := make([]byte, 64)
	_ = c.udpRaw.Read(func(fd uintptr) bool {
		for {
			n, from, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
			if err != nil {
				return true
			}
			c.record(fmt.Sprintf("udp from %s, sent %q", oracleSockaddr(from), buf[:n]))
		}
	})
	_ = c.tcpRaw.Read(func(fd uintptr) bool {
		for {
			conn, from, err := syscall.Accept4(int(fd), syscall.SOCK_CLOEXEC)
			if err != nil {
				return true
			}
			timeout := syscall.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
			_ = syscall.SetsockoptTimeval(conn, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &timeout)
			n, _ := syscall.Read(conn, buf)
			_ = syscall.Close(conn)
			c.record(fmt.Sprintf("tcp from %s, sent %q", oracleSockaddr(from), buf[:max(n, 0)]))
		}
	})
}

func oracleSockaddr(sa syscall.Sockaddr) string {
	if in4, ok := sa.(*syscall.SockaddrInet4); ok {
		return fmt.Sprintf("%d.%d.%d.%d:%d", in4.Addr[0], in4.Addr[1], in4.Addr[2], in4.Addr[3], in4.Port)
	}
	return fmt.Sprintf("%v", sa)
}

// oracleSurvivors lists the processes of the pid namespace other than bwrap's init (pid 1)
// and the supervisor, skipping zombies (already dead) and, when ignoreGroup is set,
// members of that process group.
func oracleSurvivors(ignoreGroup int) []string {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == self {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		s := string(stat)
		rparen := strings.LastIndexByte(s, ')')
		lparen := strings.IndexByte(s, '(')
		if rparen < 0 || lparen < 0 {
			continue
		}
		comm := s[lparen+1 : rparen]
		fields := strings.Fields(s[rparen+1:])
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if pgrp, _ := strconv.Atoi(fields[2]); ignoreGroup != 0 && pgrp == ignoreGroup {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("pid %d (%s) %q", pid, comm, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))))
	}
	return out
}

// oracleForeignSockets lists the sockets of the network namespace other than the canary
// listeners and the connections they accepted (local port oracleCanaryPort).
func oracleForeignSockets() []string {
	var out []string
	for _, table := range []string{"tcp", "udp", "tcp6", "udp6", "raw", "raw6", "icmp", "icmp6"} {
		f, err := os.Open("/proc/net/" + table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 {
				continue
			}
			local, remote := oracleHexAddr(fields[1]), oracleHexAddr(fields[2])
			if strings.HasSuffix(local, fmt.Sprintf(":%d", oracleCanaryPort)) {
				continue
			}
			out = append(out, fmt.Sprintf("%s %s -> %s", table, local, remote))
		}
		f.Close()
	}
	return out
}

// oracleHexAddr turns /proc/net's "0100007F:1E61" into "127.0.0.1:7777" (IPv4) or keeps the
// hex address with a decimal port (IPv6).
func oracleHexAddr(s string) string {
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	p, _ := strconv.ParseUint(port, 16, 16)
	if len(host) == 8 {
		if v, err := strconv.ParseUint(host, 16, 32); err == nil {
			return fmt.Sprintf("%d.%d.%d.%d:%d", byte(v), byte(v>>8), byte(v>>16), byte(v>>24), p)
		}
	}
	return fmt.Sprintf("[%s]:%d", host, p)
}

// oracleDevSnapshot is the sandbox's private /dev, which is writable: a command could leave
// files there (in /dev/shm for instance).
func oracleDevSnapshot() map[string]string {
	out := map[string]string{}
	_ = filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if p == "/dev/pts" {
			return fs.SkipDir // the supervisor's own pty lives there
		}
		if info, err := d.Info(); err == nil && p != "/dev" {
			desc := info.Mode().String()
			if info.Mode().IsRegular() {
				desc += fmt.Sprintf(" size=%d mtime=%d", info.Size(), info.ModTime().UnixNano())
			}
			out[strings.TrimPrefix(p, "/dev/")] = desc
		}
		return nil
	})
	return out
}

// oracleOpenPTY opens a new pseudo-terminal pair (80x24) in the sandbox's devpts.
func oracleOpenPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		master.Close()
		return nil, nil, e
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		master.Close()
		return nil, nil, e
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	ws := [4]uint16{24, 80, 0, 0}
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, slave.Fd(), syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws)))
	return master, slave, nil
}

// oracleBuffer keeps the first 16 KiB written to it and discards the rest, safely
// from several goroutines.
type oracleBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *oracleBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 16<<10 - b.buf.Len(); room > 0 {
		if len(p) > room {
			b.buf.Write(p[:room])
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}

func (b *oracleBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ---------------------------------------------------------------------------------
// Tests of the oracle itself.

// TestOracleCleanRun: the oracle must not cry wolf. Read-only commands leave no trace,
// including git's, whose index the fixture keeps fresh.
func TestOracleCleanRun(t *testing.T) {
	oracleRequireSandbox(t)
	template := oracleTemplate(t)
	jobs := []oracleJob{
		{command: "true"},
		{command: "cat notes.txt; ls -la; git status; git log --oneline; git diff --stat"},
		{command: "sleep 10"}, // timed out and killed: not a violation by itself
		{command: "less notes.txt", tty: true},
	}
	for i, r := range oracleRunParallel(t, template, jobs) {
		if len(r.violations) > 0 {
			t.Errorf("%q: oracle reports a violation for a harmless command: %s", jobs[i].command, r)
		}
	}
}

// oracleClassCase is one command that must make the oracle report a violation.
type oracleClassCase struct {
	class, command string
	tty            bool
	needs          string // a program that must be installed for the case to mean anything
}

// oracleClassCases is one example per class of bypass in docs/policy.md (and of the effects the
// oracle watches), run directly in the sandbox with no classifier in between.
var oracleClassCases = []oracleClassCase{
	{class: "function definition after the call", command: "rm notes.txt calc.sh; rm() { :; }"},
	{class: "function shadowing a command", command: "cat() { command rm -f \"$@\"; }; cat notes.txt"},
	{class: "hash -p", command: "hash -p /usr/bin/touch ls; ls pwned"},
	{class: "BASH_CMDS", command: "BASH_CMDS[cat]=/usr/bin/rm; cat notes.txt"},
	{class: "BASH_ALIASES", command: "shopt -s expand_aliases; BASH_ALIASES[ll]='touch pwned'\nll"},
	{class: "let", command: "let 'x=a[$(touch pwned)]'"},
	{class: "arithmetic over a variable read from a file", command: "read -r n < arith.txt; echo $((n + 1))"},
	{class: "printf -v", command: "printf -v 'a[$(touch pwned)]' x"},
	{class: "declare", command: "declare 'a[$(touch pwned)]=1'"},
	{class: "PS4 with set -x", command: "PS4='$(touch pwned) '; set -x; :"},
	{class: "PROMPT_COMMAND", command: "PROMPT_COMMAND='touch pwned' bash -i"},
	{class: "sed e command", command: "sed -n '$!e touch pwned' notes.txt"},
	{class: "sed s///e flag", command: "sed 's#.*#touch pwned#e' notes.txt"},
	{class: "sed w", command: "sed -n '1w owned.txt' notes.txt"},
	{class: "abbreviated long option", command: "env --sp='touch pwned'"},
	{class: "sort --compress-program", command: "seq 5000 | sort -S 64K --compress-prog=./payload.sh > /dev/null", needs: "sort"},
	{class: "tar --checkpoint-action with -t", command: "tar -tf archive.tar --checkpoint=1 --checkpoint-action=exec='touch pwned'", needs: "tar"},
	{class: "tar --to-command", command: "tar -xf archive.tar --to-command='touch pwned'", needs: "tar"},
	{class: "git grep -O", command: "git grep -O'touch pwned' alpha", needs: "git"},
	{class: "rg --pre", command: "rg --pre ./payload.sh alpha", needs: "rg"},
	{class: "ag --pager", command: "ag --pager ./payload.sh alpha", needs: "ag"},
	{class: "man -P", command: "man -P 'touch pwned' ls", tty: true, needs: "man"},
	{class: "less +!", command: "less $'+!touch pwned\\n' notes.txt", tty: true, needs: "less"},
	{class: "/dev/tcp out", command: "cat notes.txt > /dev/tcp/127.0.0.1/7777"},
	{class: "/dev/tcp in", command: "cat < /dev/tcp/127.0.0.1/7777"},
	{class: "/dev/udp out", command: "echo hi > /dev/udp/127.0.0.1/7777"},
	{class: "/dev/udp in (sends nothing)", command: "cat < /dev/udp/127.0.0.1/7777"},
	{class: "a process left behind", command: "sleep 30 &"},
	{class: "a process escaping the group", command: "setsid sleep 30"},
	{class: "write to HOME", command: "echo x > ~/.bashrc"},
	{class: "write to /tmp", command: "echo x > /tmp/owned"},
	{class: "write to /dev/shm", command: "echo x > /dev/shm/owned"},
	{class: "mtime only", command: "touch -d 2020-01-01 notes.txt"},
	{class: "mode only", command: "chmod 600 notes.txt"},
	{class: "symlink retargeted", command: "ln -sfn calc.sh link-notes"},
}

// TestOracleDetectsEachClass proves the oracle can fail: each class of bypass, if the
// classifier ever called it read-only, would be caught here.
func TestOracleDetectsEachClass(t *testing.T) {
	oracleRequireSandbox(t)
	template := oracleTemplate(t)
	var cases []oracleClassCase
	for _, c := range oracleClassCases {
		if c.needs != "" {
			if _, err := exec.LookPath(c.needs); err != nil {
				t.Logf("class %q not shown: %s is not installed", c.class, c.needs)
				continue
			}
		}
		cases = append(cases, c)
	}
	jobs := make([]oracleJob, len(cases))
	for i, c := range cases {
		jobs[i] = oracleJob{command: c.command, tty: c.tty}
	}
	for i, r := range oracleRunParallel(t, template, jobs) {
		if len(r.violations) == 0 {
			t.Errorf("class %q: the oracle saw nothing from %q: %s", cases[i].class, cases[i].command, r)
			continue
		}
		t.Logf("class %q: %s", cases[i].class, r.violations[0])
	}
}

// ---------------------------------------------------------------------------------
// The fuzz target.

// oracleFuzzPieces are the corpus lines the fuzzer builds from (never a noexec line).
type oracleFuzzPieces struct {
	safe, dangerous []string
}

func oracleLoadFuzzPieces(t testing.TB) oracleFuzzPieces {
	var p oracleFuzzPieces
	for _, c := range oracleLoadCorpus(t, "safe.txt") {
		if !c.noexec && !c.tty {
			p.safe = append(p.safe, c.command)
		}
	}
	for _, c := range oracleLoadCorpus(t, "dangerous.txt") {
		if !c.noexec && !c.tty {
			p.dangerous = append(p.dangerous, c.command)
		}
	}
	return p
}

// oracleBytes hands out the fuzz input a byte at a time, then zeros.
type oracleBytes struct {
	data []byte
	i    int
}

func (r *oracleBytes) next() int {
	if r.i >= len(r.data) {
		r.i++
		return 0
	}
	b := r.data[r.i]
	r.i++
	return int(b)
}

// pick takes two bytes, so that every line of a corpus file longer than 256 lines can
// be reached.
func (r *oracleBytes) pick(list []string) string { return list[(r.next()<<8|r.next())%len(list)] }

// oracleCompound turns fuzz bytes into a compound command of corpus pieces: lists,
// pipelines, subshells, groups, substitutions, function definitions, redirections and
// assignments, nested up to a small depth. The same bytes always give the same command.
func oracleCompound(p oracleFuzzPieces, data []byte) string {
	r := &oracleBytes{data: data}
	var gen func(depth int) string
	gen = func(depth int) string {
		op := r.next()
		if depth >= 3 || r.i > len(r.data) {
			op = 0
		}
		switch op % 16 {
		case 0, 1, 2:
			// A piece: even bytes pick a safe line, odd a dangerous one.
			if r.next()%2 == 0 {
				return r.pick(p.safe)
			}
			return r.pick(p.dangerous)
		case 3:
			return gen(depth+1) + "; " + gen(depth+1)
		case 4:
			return gen(depth+1) + " && " + gen(depth+1)
		case 5:
			return gen(depth+1) + " || " + gen(depth+1)
		case 6:
			return gen(depth+1) + " | " + gen(depth+1)
		case 7:
			return "( " + gen(depth+1) + " )"
		case 8:
			return "{ " + gen(depth+1) + "\n}"
		case 9:
			return "echo \"$(" + gen(depth+1) + "\n)\""
		case 10:
			return "cat <(" + gen(depth+1) + "\n)"
		case 11:
			name := r.pick([]string{"f", "ls", "cat", "rm", ":", "echo", "git", "sort"})
			return name + "() { " + gen(depth+1) + "\n}; " + gen(depth+1)
		case 12:
			redir := r.pick([]string{"> /dev/null", "2>/dev/null", "< notes.txt", "> owned.txt", ">> notes.txt",
				"> /dev/tcp/127.0.0.1/7777", "< /dev/udp/127.0.0.1/7777", "&> /dev/null", "<<< alpha"})
			return "{ " + gen(depth+1) + "\n} " + redir
		case 13:
			assign := r.pick([]string{"X=1", "LANG=C", "PATH=tools:$PATH", "BASH_ENV=payload.sh", "IFS=,",
				"PAGER=./payload.sh", "n=$(cat arith.txt)", "GIT_DIR=.git"})
			return assign + "; " + gen(depth+1)
		case 14:
			assign := r.pick([]string{"LC_ALL=C", "TZ=UTC", "PATH=tools:$PATH", "BASH_ENV=payload.sh", "GIT_PAGER=cat"})
			return assign + " " + gen(depth+1)
		default:
			return "for f in notes.txt sub/readme.md; do " + gen(depth+1) + "\ndone"
		}
	}
	return gen(0)
}

// FuzzOracle builds compound commands from the corpus's pieces and checks that any the
// classifier calls read-only leaves no trace in the sandbox. The seeds run in
// `go test`; explore with
//
//	go test -run '^$' -fuzz FuzzOracle -fuzztime 2m ./internal/policy/
func FuzzOracle(f *testing.F) {
	oracleRequireSandbox(f)
	pieces := oracleLoadFuzzPieces(f)
	template := oracleTemplate(f)
	// Seeds: the first byte chooses the construct (see oracleCompound), a piece is a
	// byte choosing safe (even) or dangerous (odd) and two bytes choosing the line.
	for _, seed := range [][]byte{
		{0, 0, 0, 9},                            // a safe line
		{3, 0, 0, 0, 11, 0, 0, 0, 40},           // safe; safe
		{6, 0, 0, 0, 30, 0, 0, 0, 60},           // safe | safe
		{7, 3, 0, 0, 0, 80, 0, 0, 0, 99},        // ( safe; safe )
		{9, 0, 0, 0, 14},                        // echo "$(safe)"
		{11, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 21}, // f() { safe }; safe && safe
		{12, 0, 0, 0, 16, 0, 0},                 // { safe } > /dev/null
		{13, 2, 0, 0, 0, 30},                    // X=1; safe
		{15, 6, 0, 0, 0, 7, 0, 1, 1, 70},        // for ...; do safe | dangerous; done
		{6, 0, 1, 0, 170, 0, 0, 0, 1},           // dangerous | safe
		{0, 1, 1, 100},                          // a dangerous line
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		command := oracleCompound(pieces, data)
		got := ClassifyCommand(command)
		if got.Category != v1alpha1.CategoryReadOnly {
			return
		}
		r := oracleRun(t, template, command, false)
		if len(r.violations) > 0 {
			t.Fatalf("classified %s, yet in the sandbox %q left traces: %s", oracleDescribe(got), command, r)
		}
	})
}

// ---------------------------------------------------------------------------------
// The corpus in the sandbox.

// oracleCorpusRun is one executable corpus line and what the sandbox saw of it.
type oracleCorpusRun struct {
	line   oracleCorpusLine
	result oracleResult
}

var (
	oracleCorpusOnce    sync.Once
	oracleCorpusResults map[string][]oracleCorpusRun
)

// oracleCorpusResults runs every executable line of both corpus files once per test
// process, with no classifier in between: what a command does in the sandbox does not
// depend on the classifier, so the tests below share these runs.
func oracleRunCorpus(t *testing.T) map[string][]oracleCorpusRun {
	t.Helper()
	oracleRequireSandbox(t)
	oracleCorpusOnce.Do(func() {
		template := oracleTemplate(t)
		var lines []oracleCorpusLine
		for _, name := range []string{"safe.txt", "dangerous.txt"} {
			for _, c := range oracleLoadCorpus(t, name) {
				if !c.noexec {
					lines = append(lines, c)
				}
			}
		}
		jobs := make([]oracleJob, len(lines))
		for i, c := range lines {
			jobs[i] = oracleJob{command: c.command, tty: c.tty}
		}
		start := time.Now()
		results := oracleRunParallel(t, template, jobs)
		timedOut := 0
		for _, r := range results {
			if r.report.TimedOut {
				timedOut++
			}
		}
		t.Logf("ran %d corpus commands in sandboxes in %s (%d timed out)", len(jobs), time.Since(start).Round(time.Millisecond), timedOut)
		if testing.Verbose() {
			order := make([]int, len(results))
			for i := range order {
				order[i] = i
			}
			sort.Slice(order, func(a, b int) bool { return results[order[a]].took > results[order[b]].took })
			for _, i := range order[:min(10, len(order))] {
				t.Logf("slow: %s %s", results[i].took.Round(time.Millisecond), lines[i])
			}
		}
		oracleCorpusResults = map[string][]oracleCorpusRun{}
		for i, c := range lines {
			oracleCorpusResults[c.file] = append(oracleCorpusResults[c.file], oracleCorpusRun{line: c, result: results[i]})
		}
	})
	if oracleCorpusResults == nil {
		t.Fatal("the corpus runs failed in an earlier test")
	}
	return oracleCorpusResults
}

// TestCorpusDangerousObservable keeps the dangerous corpus honest: every line the
// oracle may execute must leave a trace it sees, or the oracle could not catch the
// classifier calling it read-only. A line whose program is not installed here is
// reported, not failed.
func TestCorpusDangerousObservable(t *testing.T) {
	for _, run := range oracleRunCorpus(t)["dangerous.txt"] {
		if len(run.result.violations) > 0 {
			continue
		}
		if name := oracleMissingProgram(run.line.command); name != "" {
			t.Logf("%s: not shown here, %s is not installed", run.line, name)
			continue
		}
		t.Errorf("%s: the oracle sees no effect of this dangerous line: %s", run.line, run.result)
	}
}

// TestCorpusSafeLeavesNoTrace keeps the safe corpus honest: run as is, with no
// classifier in between, no safe line may leave a trace.
func TestCorpusSafeLeavesNoTrace(t *testing.T) {
	for _, run := range oracleRunCorpus(t)["safe.txt"] {
		if len(run.result.violations) > 0 {
			t.Errorf("%s: a safe line left traces: %s", run.line, run.result)
		}
	}
}

// oracleBashBuiltins are bash's builtins and keywords (compgen -b, compgen -k): names
// that need no program on the machine.
var oracleBashBuiltins = strings.Fields(`. : [ alias bg bind break builtin caller cd command compgen
	complete compopt continue declare dirs disown echo enable eval exec exit export false fc fg getopts
	hash help history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly
	return set shift shopt source suspend test times trap true type typeset ulimit umask unalias unset
	wait if then else elif fi case esac for select while until do done in function time { } ! [[ ]] coproc`)

// oracleMissingProgram names a program the command runs that is not installed here (so
// that a dangerous line shows nothing on this machine), or "". The names come from the
// classifier's parts and the command's first word.
func oracleMissingProgram(command string) string {
	var names []string
	if fields := strings.Fields(command); len(fields) > 0 {
		names = append(names, fields[0])
	}
	for _, p := range ClassifyCommand(command).Parts {
		if len(p.Argv) > 0 {
			names = append(names, p.Argv[0])
		}
	}
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, "=$'\"/\\(){};|&<>`*?[") || slices.Contains(oracleBashBuiltins, name) {
			continue
		}
		if _, err := exec.LookPath(name); err != nil {
			return name
		}
	}
	return ""
}
