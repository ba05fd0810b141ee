package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// installCommand is the first argument that makes the runner copy itself instead of
// running a tool: the Job's init container runs `runner install DEST` from the runner
// image, so that image needs no shell and no cp.
const installCommand = "install"

// install copies the running binary to dest with mode 0111. It writes a temporary
// file next to dest and renames it, so dest is never a partial binary.
//
// Execute only: the kernel execs a binary its user cannot read non-dumpable, so
// that no process of the sandbox's uid can ptrace the runner or open its /proc
// files (its stdin, which carries a session call's invocation; its environment,
// which carries a Job's) from its first instruction on. The runner's own
// prctl(PR_SET_DUMPABLE, 0) comes only after the Go runtime started, which a
// process racing it can beat. The pod's runner folder is mounted read-only, so
// the mode cannot be changed back. (A node with fs.suid_dumpable=1, a debugging
// setting, keeps such a process dumpable.)
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the runner binary: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".runner-*")
	if err != nil {
		return fmt.Errorf("install: the destination folder of %s: %w", dest, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install: copying to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o111); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}

// runInstall handles `runner install DEST` and exits.
func runInstall(args []string) {
	if len(args) != 1 || args[0] == "" {
		fmt.Fprintln(os.Stderr, "usage: runner install DEST")
		os.Exit(2)
	}
	if err := install(args[0]); err != nil {
		fmt.Fprintf(os.Stderr, "toolgate runner: %v\n", err)
		os.Exit(1)
	}
}
