package gitws

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Copied is what CopyTree copied, and what it left out.
type Copied struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
	// Skipped counts the entries left out: one that is no regular file, directory
	// or symlink (a device, a FIFO, a socket), one that could not be read, or one
	// that changed while it was copied. SkippedPaths names the first of them
	// (MaxReportedFiles) with why.
	Skipped      int      `json:"skipped,omitempty"`
	SkippedPaths []string `json:"skippedPaths,omitempty"`
}

// CopyTree copies the tree at src into dst, a folder that exists (the claim's
// mount):
//   - regular files, with their permission bits and modification time (setuid,
//     setgid and sticky bits are not kept);
//   - directories, likewise;
//   - symlinks as symlinks, their target as it is: never followed, never resolved;
//   - anything else (devices, FIFOs, sockets) is left out and counted, as is an
//     entry that cannot be read.
//
// src is read through an os.Root, so nothing outside it is ever read, and a file's
// content is copied only from the inode its Lstat saw as a regular file: an entry
// replaced meanwhile (by a symlink, a FIFO) is left out as changed, not followed.
// A tree that changes while it is copied may be copied as a mix of before and
// after. A tree whose files do not fit in what dst's filesystem has free is not
// copied (FailureNoSpace), and neither is the rest of one that fills it.
func CopyTree(ctx context.Context, src, dst string) (Copied, error) {
	return copyTree(ctx, src, dst, freeBytes)
}

func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail * uint64(st.Bsize)), nil
}

// dirTimes is a directory copied, whose mode and time are set once its entries are.
type dirTimes struct {
	path  string
	mode  fs.FileMode
	mtime time.Time
}

func copyTree(ctx context.Context, src, dst string, free func(string) (int64, error)) (Copied, error) {
	var c Copied
	from, err := os.OpenRoot(src)
	if err != nil {
		return c, fail(FailureOther, "the workspace to copy cannot be opened: %v", err)
	}
	defer func() { _ = from.Close() }()
	into, err := os.OpenRoot(dst)
	if err != nil {
		return c, fail(FailureOther, "the claim to copy into cannot be opened: %v", err)
	}
	defer func() { _ = into.Close() }()

	// Said before anything is written; a filesystem that cannot tell is found
	// full while copying instead.
	need := treeBytes(from)
	if have, err := free(dst); err == nil && need > have {
		return c, fail(FailureNoSpace, "the workspace to copy holds %d bytes of files and the claim has %d bytes free: give spec.workspace.volumeClaim.storage more room than the copied task's workspace takes", need, have)
	}

	skip := func(path, why string) {
		c.Skipped++
		if len(c.SkippedPaths) < MaxReportedFiles {
			c.SkippedPaths = append(c.SkippedPaths, path+" ("+why+")")
		}
	}
	var dirs []dirTimes
	err = fs.WalkDir(from.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err != nil {
			if path != "." && (errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist)) {
				why := "unreadable"
				if errors.Is(err, fs.ErrNotExist) {
					why = "changed while it was read"
				}
				skip(path, why)
				if d != nil && d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			return fail(FailureOther, "reading %s of the workspace to copy: %v", path, err)
		}
		if path == "." {
			return nil
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			target, err := from.Readlink(path)
			if err != nil {
				skip(path, "changed while it was read")
				return nil
			}
			if err := removeExisting(into, path); err != nil {
				return written(&c, path, err)
			}
			if err := into.Symlink(target, path); err != nil {
				return written(&c, path, err)
			}
			c.Symlinks++
		case t.IsDir():
			info, err := d.Info()
			if err != nil {
				skip(path, "changed while it was read")
				return fs.SkipDir
			}
			created, err := makeDir(into, path)
			if err != nil {
				return written(&c, path, err)
			}
			if created {
				// Made writable for its entries; its own mode once they are in.
				dirs = append(dirs, dirTimes{path: path, mode: info.Mode().Perm(), mtime: info.ModTime()})
			}
			c.Dirs++
		case t.IsRegular():
			n, why, err := copyFile(from, into, path)
			switch {
			case err != nil:
				return written(&c, path, err)
			case why != "":
				skip(path, why)
			default:
				c.Files++
				c.Bytes += n
			}
		default:
			skip(path, specialKind(t))
		}
		return nil
	})
	if err != nil {
		var own *Error
		if errors.As(err, &own) {
			return c, own
		}
		return c, fail(FailureOther, "copying the workspace: %v", err)
	}
	// Deepest first: a directory's own mode may forbid changing what is in it.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := into.Chmod(d.path, d.mode); err != nil {
			return c, written(&c, d.path, err)
		}
		if err := into.Chtimes(d.path, time.Time{}, d.mtime); err != nil {
			return c, written(&c, d.path, err)
		}
	}
	return c, nil
}

// treeBytes is the size of the regular files of the tree, as far as it can be read.
func treeBytes(root *os.Root) int64 {
	var n int64
	_ = fs.WalkDir(root.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// copyFile copies the regular file path of from into into. why says why it was
// left out instead (openRegular: unreadable, or changed while it was read).
func copyFile(from, into *os.Root, path string) (int64, string, error) {
	seen, err := from.Lstat(path)
	if err != nil || !seen.Mode().IsRegular() {
		return 0, "changed while it was read", nil
	}
	in, why := openRegular(from, path, seen)
	if why != "" {
		return 0, why, nil
	}
	defer func() { _ = in.Close() }()
	if err := removeExisting(into, path); err != nil {
		return 0, "", err
	}
	out, err := into.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, "", err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Chmod(seen.Mode().Perm())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = into.Chtimes(path, time.Time{}, seen.ModTime())
	}
	return n, "", err
}

// makeDir makes the directory path, writable by its owner; created is false for
// one that was there already (a claim's lost+found), which keeps its mode.
func makeDir(into *os.Root, path string) (created bool, err error) {
	err = into.Mkdir(path, 0o700)
	if !errors.Is(err, fs.ErrExist) {
		return err == nil, err
	}
	if info, err := into.Lstat(path); err == nil && info.IsDir() {
		return false, nil
	}
	if err := into.RemoveAll(path); err != nil {
		return false, err
	}
	return true, into.Mkdir(path, 0o700)
}

// removeExisting removes what is at path in the claim, if anything (a copy tried before).
func removeExisting(into *os.Root, path string) error {
	if _, err := into.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return into.RemoveAll(path)
}

// written is a failure to write path into the claim: a full claim says so.
func written(c *Copied, path string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fail(FailureNoSpace, "the claim was full at %s, after %d bytes of files: the copied workspace is larger than spec.workspace.volumeClaim.storage holds", path, c.Bytes)
	}
	return fail(FailureOther, "copying %s into the claim: %v", path, err)
}

func specialKind(t fs.FileMode) string {
	switch {
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeSocket != 0:
		return "a socket"
	}
	return fmt.Sprintf("not a regular file, directory or symlink (%v)", t)
}
