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

	"github.com/toolgate/toolgate/internal/protocol"
)

// A session pod (isolation Session) runs the runner twice over. The wire between
// the controller and `runner exec` is package protocol's (sessioncall.go); inside
// the pod:
//
//   - `runner session` is the container's PID 1. It runs no tool: it keeps the
//     container alive, reaps the processes it inherits, and kills each of them at
//     once (KillInherited). A process is inherited by PID 1 only when the call's
//     runner that it lived under has died (each call's runner is the subreaper of
//     everything its tool starts), so nothing of a call outlives its runner.
//   - `runner exec` runs one call, exec'd into the container by the controller. It
//     reads the invocation, the first line of stdin, without reading past it
//     (ReadInvocationLine, at most MaxInvocationBytes), and before the Result is
//     written every descendant of the runner is killed (Sweep).
//   - Both mark themselves non-dumpable (MakeNonDumpable), so that a process of the
//     same uid (a call's tool) can neither ptrace them nor open their /proc files:
//     a call's invocation, output and Result are out of reach of other processes.

// MaxInvocationBytes bounds the invocation line `runner exec` reads from stdin; an
// Execution's spec is far smaller.
const MaxInvocationBytes = 4 << 20

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
// protocol.PodRunnerPath for both). The command line is all that can be read of
// PID 1: it is non-dumpable, so its /proc/1/exe is not ours to follow. Only then
// may KillOthers kill the whole namespace; elsewhere (a test, a runner started by
// hand, a host) PID 1 is another program.
func InSession(procRoot string) bool {
	cmdline, err := os.ReadFile(filepath.Join(procRoot, "1", "cmdline"))
	if err != nil || len(os.Args) == 0 || !filepath.IsAbs(os.Args[0]) {
		return false
	}
	return string(cmdline) == os.Args[0]+"\x00"+protocol.SessionCommand+"\x00"
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

// Process identifies one process of a session: its pid and its start time (field
// 22 of /proc/PID/stat, clock ticks since boot), so that a pid reused by another
// process is not taken for it.
type Process struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
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
