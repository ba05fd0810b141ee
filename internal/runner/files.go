package runner

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/tools"
	"github.com/toolgate/toolgate/internal/unidiff"
)

const (
	// binarySniffBytes is how much of a file is checked for a NUL byte.
	binarySniffBytes = 8 << 10
	// defaultReadLimit is how many lines read_file shows when the input has no limit.
	defaultReadLimit = 2000
	// maxLineBytes is how much of one line read_file and grep show.
	maxLineBytes = 2000
)

// sha256Hex returns the lowercase hex SHA-256 of b.
func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// sameHash compares a baseline from the controller with a computed hash, accepting
// upper case and a "sha256:" prefix.
func sameHash(baseline, actual string) bool {
	baseline = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(baseline)), "sha256:")
	return baseline == actual
}

// isBinary reports whether the start of a file looks binary: it has a NUL byte.
func isBinary(head []byte) bool {
	return bytes.IndexByte(head, 0) >= 0
}

// runReadFile prints lines offset..offset+limit-1 of a file like cat -n: the line
// number right-aligned in 6 columns, a tab, the line. Lines longer than maxLineBytes are
// cut with a notice. A binary file (NUL in its first 8 KiB) is not printed. Either way
// the SHA-256 of the whole file is reported as the baseline for a later edit_file.
func runReadFile(ctx context.Context, ic *invocationContext) error {
	var in tools.ReadFileInput
	if err := decodeInput(ic, &in); err != nil {
		return err
	}
	if in.Path == "" {
		return exceptionf("input field path of read_file is empty")
	}
	if in.Offset < 0 || in.Limit < 0 {
		return exceptionf("input fields offset and limit of read_file must not be negative (offset is the first line, from 1)")
	}
	rel, err := ic.ws.Rel(in.Path)
	if err != nil {
		return err
	}
	f, err := ic.ws.openFile(in.Path, rel)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return pathError(in.Path, err)
	}
	if fi.IsDir() {
		return exceptionf("path %q is a directory: use list_dir or glob", in.Path)
	}
	if !fi.Mode().IsRegular() {
		return exceptionf("path %q is not a regular file", in.Path)
	}

	sum := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(f, sum), 64<<10)
	head, _ := br.Peek(binarySniffBytes)
	if isBinary(head) {
		if _, err := io.Copy(io.Discard, br); err != nil {
			return pathError(in.Path, err)
		}
		ic.res.Binary = true
		ic.res.ContentSHA256 = hex.EncodeToString(sum.Sum(nil))
		ic.out.printf("[binary file %s, %d bytes: content not shown]\n", in.Path, fi.Size())
		return nil
	}

	first := max(in.Offset, 1)
	limit := in.Limit
	if limit == 0 {
		limit = defaultReadLimit
	}
	last := first + limit - 1
	var buf bytes.Buffer
	lines := 0
	for {
		line, cut, err := nextLine(br, maxLineBytes)
		if len(line) > 0 || cut || err == nil {
			lines++
			if lines >= first && lines <= last {
				buf.Reset()
				buf.WriteString(lineNumber(lines))
				buf.Write(line)
				if cut {
					buf.WriteString(" …[line cut]")
				}
				buf.WriteByte('\n')
				ic.out.write(buf.Bytes(), false)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return pathError(in.Path, err)
		}
		if lines%4096 == 0 && ctx.Err() != nil {
			return stopped(ctx, ic.inv.Tool)
		}
	}
	ic.res.ContentSHA256 = hex.EncodeToString(sum.Sum(nil))
	switch {
	case lines == 0:
		ic.out.printf("[empty file]\n")
	case first > lines:
		ic.out.printf("[offset %d is past the end: the file has %d lines]\n", first, lines)
	case first > 1 || last < lines:
		ic.out.printf("[showing lines %d-%d of %d", first, min(last, lines), lines)
		if last < lines {
			ic.out.printf("; read on with offset=%d", last+1)
		}
		ic.out.printf("]\n")
	}
	return nil
}

// lineNumber formats n as cat -n does: right-aligned in 6 columns, then a tab.
func lineNumber(n int) string { return fmt.Sprintf("%6d\t", n) }

// nextLine reads one line (consuming it whole) and returns its first keep bytes without
// the "\n", whether bytes were dropped, and io.EOF at the end of the input.
func nextLine(br *bufio.Reader, keep int) (line []byte, cut bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if err == nil {
			frag = frag[:len(frag)-1]
		}
		if room := keep - len(line); room > 0 {
			n := min(len(frag), room)
			line = append(line, frag[:n]...)
			cut = cut || n < len(frag)
		} else if len(frag) > 0 {
			cut = true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, cut, err
	}
}

// fileTarget is a file a tool writes: its parent directory and name in it, so that
// every change goes through a confined descriptor of the parent and a single name.
type fileTarget struct {
	path string // as the tool was given it, for messages
	rel  string // relative to the workspace root
	dir  string
	base string
}

// existing is what a target holds before a write.
type existing struct {
	exists  bool
	content []byte
	mode    fs.FileMode
}

func (ic *invocationContext) target(p string) (fileTarget, error) {
	if p == "" {
		return fileTarget{}, exceptionf("input field path of %s is empty", ic.inv.Tool)
	}
	rel, err := ic.ws.Rel(p)
	if err != nil {
		return fileTarget{}, err
	}
	if rel == "." || path.Base(rel) == ".." {
		return fileTarget{}, exceptionf("path %q names the workspace itself, not a file", p)
	}
	return fileTarget{path: p, rel: rel, dir: path.Dir(rel), base: path.Base(rel)}, nil
}

// read returns the target's current content. A final symlink is refused rather than
// replaced or followed: write to the file it points to.
func (w *Workspace) read(t fileTarget) (existing, error) {
	dirfd, err := w.open(t.path, t.dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOENT) {
		return existing{}, nil
	}
	if err != nil {
		return existing{}, err
	}
	defer func() { _ = unix.Close(dirfd) }()
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, t.base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return existing{}, nil
		}
		return existing{}, pathError(t.path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		dest, _ := readlinkat(dirfd, t.base)
		return existing{}, exceptionf("path %q is a symlink (to %q): write to the file it points to instead; nothing was written", t.path, dest)
	case unix.S_IFDIR:
		return existing{}, exceptionf("path %q is a directory; nothing was written", t.path)
	default:
		return existing{}, exceptionf("path %q is not a regular file; nothing was written", t.path)
	}
	fd, err := unix.Openat(dirfd, t.base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return existing{}, pathError(t.path, err)
	}
	f := os.NewFile(uintptr(fd), t.rel)
	defer func() { _ = f.Close() }()
	content, err := io.ReadAll(f)
	if err != nil {
		return existing{}, pathError(t.path, err)
	}
	return existing{exists: true, content: content, mode: fs.FileMode(st.Mode & 0o7777)}, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// writeAtomic replaces the target with content: it creates the parent directories,
// writes a temporary file in the same directory, syncs it and renames it over the
// target, so a reader sees the old or the new content, never a mix.
func (w *Workspace) writeAtomic(t fileTarget, content []byte, mode fs.FileMode) error {
	if err := w.mkdirAll(t.path, t.dir); err != nil {
		return err
	}
	dirfd, err := w.open(t.path, t.dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(dirfd) }()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + t.base + ".toolgate-" + hex.EncodeToString(rnd[:])
	if len(tmp) > 255 {
		tmp = ".toolgate-" + hex.EncodeToString(rnd[:])
	}
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return pathError(t.path, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	err = writeAll(f, content, mode)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, t.base)
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return pathError(t.path, err)
	}
	return nil
}

func writeAll(f *os.File, content []byte, mode fs.FileMode) error {
	if _, err := f.Write(content); err != nil {
		return err
	}
	// The umask narrowed the mode at create; the file keeps the mode it had.
	if err := f.Chmod(mode); err != nil {
		return err
	}
	return f.Sync()
}

// runWriteFile writes the whole content of a file, creating it and its parent
// directories when needed. With a baseline, it refuses (Stale) when the file does not
// have that content any more, and writes nothing; with protocol.BaselineAbsent it
// refuses when the file exists (an overwrite the task has not read first).
func runWriteFile(_ context.Context, ic *invocationContext) error {
	var in tools.WriteFileInput
	if err := decodeInput(ic, &in); err != nil {
		return err
	}
	t, err := ic.target(in.Path)
	if err != nil {
		return err
	}
	cur, err := ic.ws.read(t)
	if err != nil {
		return err
	}
	if ic.inv.BaselineSHA256 == protocol.BaselineAbsent {
		if cur.exists {
			return stalef("file %q exists and this task has not read it: read it first, then write it; nothing was written", in.Path)
		}
	} else if ic.inv.BaselineSHA256 != "" {
		if !cur.exists {
			return stalef("file %q no longer exists: it changed since it was read; read it again; nothing was written", in.Path)
		}
		if h := sha256Hex(cur.content); !sameHash(ic.inv.BaselineSHA256, h) {
			return stalef("file %q changed since it was read (sha256 was %s, is %s): read it again; nothing was written", in.Path, ic.inv.BaselineSHA256, h)
		}
	}
	mode := fs.FileMode(0o644)
	if cur.exists {
		mode = cur.mode
	}
	content := []byte(in.Content)
	if err := ic.ws.writeAtomic(t, content, mode); err != nil {
		return err
	}
	added, removed := unidiff.DiffStats(cur.content, content)
	ic.res.ContentSHA256 = sha256Hex(content)
	ic.res.LinesAdded, ic.res.LinesRemoved = added, removed
	verb := "created"
	if cur.exists {
		verb = "overwrote"
	}
	ic.out.printf("%s %s: %d bytes, %d lines (+%d -%d)\n", verb, in.Path, len(content), len(unidiff.SplitLines(content)), added, removed)
	return nil
}

// runEditFile replaces the one occurrence of oldText with newText. It refuses (Stale)
// when the file no longer has the baseline content, and (Exception) when oldText is
// missing or occurs more than once; in both cases nothing is written. It prints the
// unified diff of the change.
func runEditFile(_ context.Context, ic *invocationContext) error {
	var in tools.EditFileInput
	if err := decodeInput(ic, &in); err != nil {
		return err
	}
	t, err := ic.target(in.Path)
	if err != nil {
		return err
	}
	switch {
	case ic.inv.BaselineSHA256 == "":
		return exceptionf("edit_file of %q needs baselineSHA256, the contentSHA256 of an earlier read_file of that path; nothing was written", in.Path)
	case in.OldText == "":
		return exceptionf("input field oldText of edit_file is empty: give the exact text to replace; nothing was written")
	case in.OldText == in.NewText:
		return exceptionf("input fields oldText and newText of edit_file are the same: there is nothing to change; nothing was written")
	}
	cur, err := ic.ws.read(t)
	if err != nil {
		return err
	}
	if !cur.exists {
		return stalef("file %q no longer exists: it changed since it was read; nothing was written", in.Path)
	}
	if h := sha256Hex(cur.content); !sameHash(ic.inv.BaselineSHA256, h) {
		return stalef("file %q changed since it was read (sha256 was %s, is %s): read it again and redo the edit; nothing was written", in.Path, ic.inv.BaselineSHA256, h)
	}
	old := string(cur.content)
	at, count := occurrences(old, in.OldText)
	switch {
	case count == 0:
		return exceptionf("oldText was not found in %q: copy it exactly from read_file output (without line numbers), including whitespace; nothing was written", in.Path)
	case count > 1:
		return exceptionf("oldText occurs %d times in %q: include more surrounding text so it matches exactly once; nothing was written", count, in.Path)
	}
	content := []byte(old[:at] + in.NewText + old[at+len(in.OldText):])
	if err := ic.ws.writeAtomic(t, content, cur.mode); err != nil {
		return err
	}
	diff, added, removed := unidiff.UnifiedDiff(t.rel, cur.content, content)
	ic.res.ContentSHA256 = sha256Hex(content)
	ic.res.LinesAdded, ic.res.LinesRemoved = added, removed
	ic.out.write([]byte(diff), false)
	return nil
}

// occurrences returns where needle first occurs in s and how many times it occurs,
// counting overlapping occurrences: "aa" occurs twice in "aaa", and replacing "one" of
// them would be ambiguous.
func occurrences(s, needle string) (first, count int) {
	first = strings.Index(s, needle)
	if first < 0 {
		return -1, 0
	}
	for i := first; i >= 0; {
		count++
		next := strings.Index(s[i+1:], needle)
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return first, count
}
