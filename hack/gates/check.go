package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Outcome is what became of one removed gate.
type Outcome string

const (
	// Killed: the listed tests failed with the gate removed.
	Killed Outcome = "KILLED"
	// Survived: the listed tests passed with the gate removed; they do not prove it.
	Survived Outcome = "SURVIVED"
	// Broken: the entry could not be checked (its tests fail or skip with the gate in
	// place, or its mutation does not compile).
	Broken Outcome = "BROKEN"
)

// Result is one entry's check.
type Result struct {
	Gate    Gate
	Outcome Outcome
	// Detail says which tests caught the removal, or why the entry is broken.
	Detail string
	Took   time.Duration
}

// Report is a whole run.
type Report struct {
	Results []Result
	Took    time.Duration
}

// OK reports whether every removal was caught.
func (r Report) OK() bool {
	for _, res := range r.Results {
		if res.Outcome != Killed {
			return false
		}
	}
	return len(r.Results) > 0
}

// Score is the removals caught in one package's tests.
type Score struct {
	Package        string
	Killed, Listed int
}

// Scores are the package scores, in package order.
func (r Report) Scores() []Score {
	by := map[string]*Score{}
	for _, res := range r.Results {
		s := by[res.Gate.Package]
		if s == nil {
			s = &Score{Package: res.Gate.Package}
			by[res.Gate.Package] = s
		}
		s.Listed++
		if res.Outcome == Killed {
			s.Killed++
		}
	}
	out := make([]Score, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Package < out[j].Package })
	return out
}

// Options says what to check and how.
type Options struct {
	// Root is the repository: it is copied, never changed.
	Root  string
	Gates []Gate
	// Jobs is how many removals are tested at once, each in a copy of its own.
	Jobs int
	// Env is the environment of the builds and tests.
	Env []string
	// Progress gets a line per finished entry; nil for none.
	Progress io.Writer
}

// Check removes each gate in turn, in throwaway copies of the repository, and runs
// the tests that must catch it. Before that it runs each entry's tests with the gate
// in place: tests that fail or skip there prove nothing about the gate. It returns
// an error, and checks nothing, when an entry is stale (Locate).
func Check(ctx context.Context, o Options) (Report, error) {
	start := time.Now()
	if err := Locate(o.Root, o.Gates); err != nil {
		return Report{}, err
	}
	base, err := workRoot()
	if err != nil {
		return Report{}, err
	}
	defer func() { _ = os.RemoveAll(base) }()
	// Tests run programs as other users too (nobody): the copies must be theirs to
	// read.
	if err := os.Chmod(base, 0o755); err != nil {
		return Report{}, err
	}
	workers := make(chan *worker, max(o.Jobs, 1))
	for i := range cap(workers) {
		w, err := newWorker(o.Root, workerDir(base, i), o.Env)
		if err != nil {
			return Report{}, err
		}
		workers <- w
	}

	// With the gates in place: one run per distinct set of tests.
	type key struct{ pkg, run string }
	baselines := map[key]error{}
	var keys []key
	for _, g := range o.Gates {
		k := key{g.Package, g.Run}
		if _, ok := baselines[k]; !ok {
			baselines[k] = nil
			keys = append(keys, k)
		}
	}
	var mu sync.Mutex
	parallel(workers, len(keys), func(w *worker, i int) {
		k := keys[i]
		var g Gate
		for _, e := range o.Gates {
			if e.Package == k.pkg && e.Run == k.run {
				g = e
				break
			}
		}
		err := w.baseline(ctx, g)
		mu.Lock()
		baselines[k] = err
		mu.Unlock()
	})

	results := make([]Result, len(o.Gates))
	parallel(workers, len(o.Gates), func(w *worker, i int) {
		g := o.Gates[i]
		t := time.Now()
		res := Result{Gate: g}
		if err := baselines[key{g.Package, g.Run}]; err != nil {
			res.Outcome, res.Detail = Broken, err.Error()
		} else {
			res.Outcome, res.Detail = w.mutant(ctx, g)
		}
		res.Took = time.Since(t)
		results[i] = res
		if o.Progress != nil {
			mu.Lock()
			fmt.Fprintf(o.Progress, "%-8s %s (%s, %s): %s\n", res.Outcome, g.ID, g.Package, res.Took.Round(time.Second), res.Detail)
			mu.Unlock()
		}
	})
	return Report{Results: results, Took: time.Since(start)}, nil
}

// parallel calls f for 0..n-1, each with a worker of its own, as many at once as
// there are workers.
func parallel(workers chan *worker, n int, f func(w *worker, i int)) {
	var wg sync.WaitGroup
	for i := range n {
		w := <-workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { workers <- w }()
			f(w, i)
		}()
	}
	wg.Wait()
}

// workRoot makes the folder of a run's workers. Its name is short, and so are the
// workers' folders below it (workerDir, and their "t"): a socket a test makes in
// its t.TempDir must fit the 107 bytes of a Unix socket's path, as it does outside
// the check.
func workRoot() (string, error) { return os.MkdirTemp("", "gates-") }

// workerDir is the folder of worker i below base.
func workerDir(base string, i int) string { return filepath.Join(base, fmt.Sprint(i)) }

// worker is one copy of the repository, where one entry at a time is checked.
type worker struct {
	repo     string // the copy
	tmp      string // TMPDIR of its tests, emptied after each run
	bin      string // where its test binaries are built
	buildEnv []string
	testEnv  []string // buildEnv with TMPDIR=tmp
}

func newWorker(root, dir string, env []string) (*worker, error) {
	w := &worker{repo: filepath.Join(dir, "repo"), tmp: filepath.Join(dir, "t"), bin: filepath.Join(dir, "bin")}
	for _, d := range []string{dir, w.bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := copyTree(root, w.repo); err != nil {
		return nil, fmt.Errorf("copying the repository: %w", err)
	}
	w.buildEnv = env
	w.testEnv = append(append([]string(nil), env...), "TMPDIR="+w.tmp)
	return w, nil
}

// baseline runs g's tests with every gate in place: they must pass, and at least
// one of them must have run and not skipped.
func (w *worker) baseline(ctx context.Context, g Gate) error {
	run, err := w.test(ctx, g, false)
	if err != nil {
		return fmt.Errorf("with the gate in place, the tests do not build: %v", err)
	}
	switch {
	case run.exit != 0:
		return fmt.Errorf("with the gate in place, the tests fail (%s), so they cannot tell its removal:\n%s", run.failure(), run.tail)
	case len(run.passed) == 0 && len(run.skipped) > 0:
		return fmt.Errorf("with the gate in place, every test that -run %q selects skips (%s): they prove nothing here", g.Run, strings.Join(run.skipped, ", "))
	case len(run.passed) == 0:
		return fmt.Errorf("-run %q selects no test of %s", g.Run, g.Package)
	}
	return nil
}

// mutant runs g's tests with g removed from the worker's copy, and puts it back.
func (w *worker) mutant(ctx context.Context, g Gate) (Outcome, string) {
	path := filepath.Join(w.repo, g.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return Broken, err.Error()
	}
	mutated, err := g.Mutate(orig)
	if err != nil {
		return Broken, err.Error()
	}
	info, err := os.Stat(path)
	if err != nil {
		return Broken, err.Error()
	}
	if err := os.WriteFile(path, mutated, info.Mode()); err != nil {
		return Broken, err.Error()
	}
	defer func() { _ = os.WriteFile(path, orig, info.Mode()) }()
	run, err := w.test(ctx, g, true)
	switch {
	case err != nil:
		return Broken, "the mutation does not compile: " + err.Error()
	case run.exit == 0:
		return Survived, fmt.Sprintf("%s passed with the gate removed: %s", strings.Join(run.passed, ", "), g.Keeps)
	default:
		return Killed, "caught by " + run.failure()
	}
}

// testRun is what one run of a test binary said.
type testRun struct {
	exit                    int
	passed, failed, skipped []string // top-level tests
	failedSub               []string // subtests
	timedOut                bool
	tail                    string // its last lines
}

// failure says which tests failed, or how the binary failed when none did.
func (r testRun) failure() string {
	switch {
	case len(r.failedSub) > 0:
		return names(r.failedSub)
	case len(r.failed) > 0:
		return names(r.failed)
	case r.timedOut:
		return "a test timed out"
	}
	return fmt.Sprintf("exit status %d, no test failed (TestMain: a leak check, or a crash)", r.exit)
}

// test builds g's package's test binary in the copy (mutated: with g removed) and
// runs g's tests there, in a process group of their own that is killed once the
// run ended. The error is a build failure.
func (w *worker) test(ctx context.Context, g Gate, mutated bool) (testRun, error) {
	// The binary of the code as it is serves every baseline of its package; a
	// mutant's is built, run and removed.
	bin := filepath.Join(w.bin, strings.NewReplacer("/", "_", ".", "_").Replace(g.Package)+".test")
	if mutated {
		bin = filepath.Join(w.bin, "mutant.test")
		defer func() { _ = os.Remove(bin) }()
	}
	if _, err := os.Stat(bin); mutated || err != nil {
		build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, g.Package)
		build.Dir, build.Env = w.repo, w.buildEnv
		if out, err := build.CombinedOutput(); err != nil {
			return testRun{}, fmt.Errorf("%v\n%s", err, lastLines(string(out), 20))
		}
	}
	if err := os.RemoveAll(w.tmp); err != nil {
		return testRun{}, err
	}
	if err := os.Mkdir(w.tmp, 0o755); err != nil {
		return testRun{}, err
	}
	defer func() { _ = os.RemoveAll(w.tmp) }()

	timeout := g.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run", g.Run, "-test.count=1", "-test.v", "-test.timeout", timeout.String())
	cmd.Dir, cmd.Env = filepath.Join(w.repo, g.Package), w.testEnv
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.StdoutPipe()
	if err != nil {
		return testRun{}, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return testRun{}, err
	}
	run := parseTestOutput(out)
	err = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		run.exit = exit.ExitCode()
		if run.exit < 0 { // killed by a signal
			run.exit, run.timedOut = 128, true
		}
	default:
		return testRun{}, err
	}
	return run, nil
}

// parseTestOutput reads go test -v output to its end.
func parseTestOutput(r io.Reader) testRun {
	var run testRun
	var tail []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		tail = append(tail, line)
		if len(tail) > 30 {
			tail = tail[1:]
		}
		trimmed := strings.TrimLeft(line, " ")
		sub := len(trimmed) < len(line)
		for _, m := range []struct {
			prefix string
			to     *[]string
		}{{"--- PASS: ", &run.passed}, {"--- FAIL: ", &run.failed}, {"--- SKIP: ", &run.skipped}} {
			name, ok := strings.CutPrefix(trimmed, m.prefix)
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, " (")
			switch {
			case !sub:
				*m.to = append(*m.to, name)
			case m.to == &run.failed:
				run.failedSub = append(run.failedSub, name)
			}
		}
		if strings.HasPrefix(line, "panic: test timed out") {
			run.timedOut = true
		}
	}
	_, _ = io.Copy(io.Discard, r)
	run.tail = strings.Join(tail, "\n")
	return run
}

// names lists the first few test names.
func names(tests []string) string {
	const shown = 4
	if len(tests) <= shown {
		return strings.Join(tests, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(tests[:shown], ", "), len(tests)-shown)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// copyTree copies the repository at root to dst: files with their modes, symlinks
// as symlinks, without .git and the root's bin/ (built tools and envtest binaries,
// which the copy reaches through the environment).
func copyTree(root, dst string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.Name() == ".git" || rel == "bin" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, info.Mode().Perm())
		}
		return nil // a socket or a FIFO has no place in a build
	})
}
