package runner

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// A session pod (isolation Session) runs the runner twice over, with this contract:
//
//   - `runner session` is the container's PID 1. It runs no tool: it keeps the
//     container alive, reaps the processes it inherits, and kills each of them at
//     once (KillInherited). A process is inherited by PID 1 only when the call's
//     runner that it lived under has died (each call's runner is the subreaper of
//     everything its tool starts), so nothing of a call outlives its runner.
//   - `runner exec` runs one call, exec'd into the container by the controller
//     (pods/exec). The Invocation is the first line of stdin (compact JSON, at most
//     MaxInvocationBytes); stdin stays open for the whole call, and its end (the
//     controller or its connection gone) stops the call as a timeout does. stdout
//     carries the call's output once the call ended: all of it when it is at most
//     MaxOutputBytes, else exactly its first head and last tail bytes
//     (OutputBudgets). stderr carries the Result as compact JSON, last. The exit
//     code is ProcessExitCode, as in a Job. Before the Result is written every
//     descendant of the runner is killed (Sweep).
//   - A background job (Invocation.Background) is `runner exec` too, in a session
//     pod of its own (no other call ever runs beside it): its first line on stderr
//     is Started, written before the tool starts; its output goes to stdout as it
//     comes (the controller keeps head and tail), and the Result follows Started on
//     stderr when the job ends.
//   - Both mark themselves non-dumpable (MakeNonDumpable), so that a process of the
//     same uid (a call's tool) can neither ptrace them nor open their /proc files:
//     a call's invocation, output and Result are out of reach of other processes.

// PodRunnerDir is the folder the runner is copied into in a sandbox pod, and
// PodRunnerPath the runner there.
const (
	PodRunnerDir  = "/toolgate-runner"
	PodRunnerPath = PodRunnerDir + "/runner"
)

// SessionCommand and ExecCommand are the runner's first argument in a session pod.
const (
	SessionCommand = "session"
	ExecCommand    = "exec"
)

// MaxInvocationBytes bounds the invocation line `runner exec` reads from stdin; an
// Execution's spec is far smaller.
const MaxInvocationBytes = 4 << 20

// cutMarkerMax bounds the length of the marker the controller puts where output was
// cut, so that head, marker and tail together stay within maxOutputBytes.
const cutMarkerMax = 64

// OutputBudgets splits maxOutputBytes into the bytes kept from the head and from the
// tail of an output that does not fit, leaving room for the cut marker. The runner
// of a session call sends exactly these; the controller shows them.
func OutputBudgets(maxOutputBytes int32) (head, tail int) {
	room := max(int(maxOutputBytes)-cutMarkerMax, 2)
	head = room / 2
	return head, room - head
}

// prSetDumpable is PR_SET_DUMPABLE of prctl(2).
const prSetDumpable = 4

// MakeNonDumpable makes the calling process non-dumpable: its /proc/PID files are
// owned by root and ptrace by a process of the same uid is refused, so other
// processes of the sandbox user cannot read or change its memory or descriptors.
// A program the process executes is dumpable again, as usual.
func MakeNonDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}

// ReadInvocationLine reads the invocation, the first line of r, without reading past
// it; the rest of r is the call's lifeline.
func ReadInvocationLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxInvocationBytes {
			return nil, fmt.Errorf("the invocation on stdin is longer than %d bytes", MaxInvocationBytes)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("stdin ended before the invocation's line did (%d bytes read)", len(line))
		default:
			return nil, fmt.Errorf("reading the invocation from stdin: %w", err)
		}
	}
}

// Capture keeps what a session call sends of its output: the first maxOutputBytes
// bytes and the last tail budget bytes, whatever the output's length.
type Capture struct {
	max        int
	head       []byte
	tail       []byte // a ring of the last tailBudget bytes
	tailBudget int
	next       int // where the ring writes next, once full
	total      int64
}

// NewCapture returns a Capture for an invocation's maxOutputBytes.
func NewCapture(maxOutputBytes int32) *Capture {
	_, tail := OutputBudgets(maxOutputBytes)
	return &Capture{max: max(int(maxOutputBytes), 0), tailBudget: tail}
}

// Write keeps p's bytes in the head and the ring; it never fails.
func (c *Capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	if room := c.max - len(c.head); room > 0 {
		c.head = append(c.head, p[:min(room, len(p))]...)
	}
	q := p
	if len(q) > c.tailBudget {
		q = q[len(q)-c.tailBudget:]
	}
	for len(q) > 0 {
		if len(c.tail) < c.tailBudget {
			n := min(c.tailBudget-len(c.tail), len(q))
			c.tail = append(c.tail, q[:n]...)
			q = q[n:]
			continue
		}
		n := copy(c.tail[c.next:], q)
		c.next = (c.next + n) % c.tailBudget
		q = q[n:]
	}
	return len(p), nil
}

// Total is how many bytes were written.
func (c *Capture) Total() int64 { return c.total }

// Bytes is what the runner sends: the whole output when it fits in maxOutputBytes,
// else its first head budget bytes followed by its last tail budget bytes.
func (c *Capture) Bytes(maxOutputBytes int32) []byte {
	if c.total <= int64(c.max) {
		return c.head
	}
	headBudget, _ := OutputBudgets(maxOutputBytes)
	out := append([]byte(nil), c.head[:min(headBudget, len(c.head))]...)
	out = append(out, c.tail[c.next:]...)
	return append(out, c.tail[:c.next]...)
}

// KillInherited is the session's PID 1 loop: every pause, it kills (SIGKILL) every
// live child of parent (the caller's pid) and reaps its exited children. As the
// namespace's PID 1, the only processes the session is the parent of are those a
// dead call's runner left behind (a call's runner is exec'd from outside the
// namespace, so it is no child of PID 1). It returns when stop is closed.
func KillInherited(procRoot string, parent int, pause time.Duration, stop <-chan struct{}) {
	for {
		if procs, err := readProcs(procRoot); err == nil {
			for _, p := range procs {
				if p.ppid == parent && p.pid != parent && p.live() {
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
				}
			}
		}
		reapChildren()
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
	}
}

// InSession reports whether the caller runs in a session pod's PID namespace: its
// PID 1 is `runner session` of the path this runner was started by (in a pod,
// PodRunnerPath for both). The command line is all that can be read of PID 1: it
// is non-dumpable, so its /proc/1/exe is not ours to follow. Only then may
// KillOthers kill the whole namespace; elsewhere (a test, a runner started by hand,
// a host) PID 1 is another program.
func InSession(procRoot string) bool {
	cmdline, err := os.ReadFile(filepath.Join(procRoot, "1", "cmdline"))
	if err != nil || len(os.Args) == 0 || !filepath.IsAbs(os.Args[0]) {
		return false
	}
	return string(cmdline) == os.Args[0]+"\x00"+SessionCommand+"\x00"
}

// KillOthers SIGKILLs every process of the session but its PID 1 and the caller, and
// returns once none is left, or an error naming the survivors after bound. A call's
// runner runs it before the tool starts and after it ends: calls of a session run
// one at a time, so anything else alive is what an earlier call left (a runner it
// stopped, orphans it kept forking, a thread group whose leader exited), and none of
// it may see or touch this call. kill(-1) reaches every process of the namespace
// the caller may signal (all of them: one uid), and also one forked between two
// reads of /proc.
func KillOthers(procRoot string, bound time.Duration) error {
	self := os.Getpid()
	deadline := time.Now().Add(bound)
	for {
		_ = syscall.Kill(-1, syscall.SIGKILL)
		reapChildren()
		procs, err := readProcs(procRoot)
		if err != nil {
			return err
		}
		var left []proc
		for _, p := range procs {
			if p.pid != 1 && p.pid != self && p.live() {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			sort.Slice(left, func(i, j int) bool { return left[i].pid < left[j].pid })
			return fmt.Errorf("%d process(es) of earlier calls could not be killed within %s: %s", len(left), bound, describe(left))
		}
		time.Sleep(sweepPause)
	}
}

// Started is the first line `runner exec` writes on stderr for a background job,
// before the job's tool starts.
type Started struct {
	Started bool `json:"started"`
}

// SessionInvocation is what `runner exec` reads of the invocation before it runs
// it: maxOutputBytes (0 when the invocation cannot be read: Run then fails the call,
// and its output is only the runner's message) and whether it is a background job.
func SessionInvocation(invocationJSON []byte) (maxOutput int32, background bool) {
	var inv struct {
		MaxOutputBytes int32 `json:"maxOutputBytes"`
		Background     bool  `json:"background"`
	}
	if json.Unmarshal(invocationJSON, &inv) != nil {
		return 0, false
	}
	return inv.MaxOutputBytes, inv.Background
}
