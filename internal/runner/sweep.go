package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultSweepBound is how long Sweep keeps killing before it gives up. It is short
// because it runs inside the pod's termination grace period when the pod is deleted.
const DefaultSweepBound = 3 * time.Second

// sweepPause is the pause between two rounds of Sweep, so that killed processes can
// exit and orphans can be reparented to the runner.
const sweepPause = 10 * time.Millisecond

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// BecomeSubreaper makes the runner the reaper of every orphan below it, so that a
// process that left the tool's process group and session (setsid, timeout, a double
// fork) stays the runner's descendant and Sweep finds it even when the runner is not
// the container's PID 1. As PID 1 of the container it is that already.
func BecomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	return nil
}

// Sweep SIGKILLs every process the tool may have left behind and returns once none is
// left, or an error naming the survivors after bound. It is what makes the Result the
// runner's own: the tool runs as the runner's uid in the runner's container, so any
// process of it that is still alive could write the termination message after the
// runner did.
//
// As the container's PID 1 (how the Job runs it), the targets are every process of the
// container's PID namespace other than the runner. Otherwise (run by hand, or in
// tests) they are the runner's descendants only: the processes of its PID namespace
// belong to others then, and BecomeSubreaper keeps the tool's orphans among the
// descendants. procRoot is the proc filesystem ("/proc").
func Sweep(procRoot string, bound time.Duration) error {
	self := os.Getpid()
	wholeNamespace := self == 1
	deadline := time.Now().Add(bound)
	for {
		if wholeNamespace {
			// As PID 1 of a PID namespace, kill(-1) reaches every other process of the
			// namespace in one call, and so also a process forked between two reads of
			// /proc. PID 1 itself is spared by the kernel.
			_ = syscall.Kill(-1, syscall.SIGKILL)
		}
		left, err := sweepTargets(procRoot, self, wholeNamespace)
		if err != nil {
			return err
		}
		for _, p := range left {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		reapChildren()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d process(es) of the call could not be killed within %s: %s", len(left), bound, describe(left))
		}
		time.Sleep(sweepPause)
	}
}

// proc is one process read from /proc.
type proc struct {
	pid, ppid int
	state     byte
	comm      string
	threads   int
}

// live says whether the process can still act. A zombie cannot, and its parent (or
// the runner, once the parent is gone) reaps it; but a thread group whose leader
// exited shows the leader's zombie state while its other threads run on, and
// cannot be reaped until they end: it is live, and a kill of its pid ends them.
func (p proc) live() bool {
	return (p.state != 'Z' && p.state != 'X') || p.threads > 1
}

// sweepTargets returns the live processes Sweep must kill: all but self when
// wholeNamespace, else self's descendants. A zombie is not live: it cannot act any
// more, and its parent (or the runner, once the parent is gone) reaps it.
func sweepTargets(procRoot string, self int, wholeNamespace bool) ([]proc, error) {
	procs, err := readProcs(procRoot)
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	want := map[int]bool{}
	if wholeNamespace {
		for pid := range procs {
			want[pid] = pid != self
		}
	} else {
		queue := append([]int(nil), children[self]...)
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			if want[pid] || pid == self {
				continue
			}
			want[pid] = true
			queue = append(queue, children[pid]...)
		}
	}
	var left []proc
	for pid, ok := range want {
		if p := procs[pid]; ok && p.live() {
			left = append(left, p)
		}
	}
	sort.Slice(left, func(i, j int) bool { return left[i].pid < left[j].pid })
	return left, nil
}

// readProcs reads every process of procRoot. A process that exits while it is read
// is left out.
func readProcs(procRoot string) (map[int]proc, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("cannot list the processes in %s: %w", procRoot, err)
	}
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue
			}
			return nil, fmt.Errorf("cannot read process %d: %w", pid, err)
		}
		p, err := parseStat(pid, string(stat))
		if err != nil {
			return nil, err
		}
		procs[pid] = p
	}
	return procs, nil
}

// parseStat parses /proc/PID/stat: "pid (comm) state ppid ...". comm may hold spaces
// and parentheses, so the fields after it are found from the last ')'.
func parseStat(pid int, stat string) (proc, error) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return proc{}, fmt.Errorf("process %d: unreadable stat %q", pid, stat)
	}
	fields := strings.Fields(stat[end+1:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return proc{}, fmt.Errorf("process %d: unreadable stat %q", pid, stat)
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return proc{}, fmt.Errorf("process %d: unreadable parent in stat %q", pid, stat)
	}
	// Field 20, num_threads, is the 18th after the name; a stat cut short counts
	// one thread.
	threads := 1
	if len(fields) > 17 {
		if n, err := strconv.Atoi(fields[17]); err == nil {
			threads = n
		}
	}
	return proc{pid: pid, ppid: ppid, state: fields[0][0], comm: stat[open+1 : end], threads: threads}, nil
}

// reapChildren collects every exited child of the runner without waiting; killed
// orphans are reparented to it and would stay zombies otherwise.
func reapChildren() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

func describe(procs []proc) string {
	parts := make([]string, 0, len(procs))
	for i, p := range procs {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(procs)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("pid %d (%s, state %c, %d threads)", p.pid, p.comm, p.state, p.threads))
	}
	return strings.Join(parts, ", ")
}
