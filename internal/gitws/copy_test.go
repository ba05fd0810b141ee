package gitws

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// write makes the file rel of dir with text and mode (mode set after, so that
// the umask plays no part).
func write(t *testing.T, dir, rel, text string, mode fs.FileMode) {
	t.Helper()
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode()
}

// The copy keeps files with their modes and times, directories with theirs, and
// symlinks as symlinks with their targets as they were, whether they point in the
// tree, out of it or nowhere.
func TestCopyTreeKeepsFilesModesAndSymlinks(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, src, "calc.sh", "echo $(($1 + $2))\n", 0o755)
	write(t, src, "README.md", "calc\n", 0o644)
	write(t, src, "private/key", "k\n", 0o600)
	write(t, src, "frozen/held.txt", "held\n", 0o444)
	write(t, src, ".toolgate/.gitignore", "*\n", 0o644)
	if err := os.Chmod(filepath.Join(src, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A folder nobody may write to: its file must still get in, and it keeps its mode.
	if err := os.Chmod(filepath.Join(src, "frozen"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Chmod(filepath.Join(src, "frozen"), 0o755)
		_ = os.Chmod(filepath.Join(dst, "frozen"), 0o755)
	})
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(src, "README.md"), old, old); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"link": "calc.sh", "dirlink": "private", "dangling": "no/such/file", "up": "../../outside"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}

	c, err := CopyTree(context.Background(), src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if c.Files != 5 || c.Dirs != 4 || c.Symlinks != 4 || c.Skipped != 0 || c.Bytes != int64(len("echo $(($1 + $2))\n")+len("calc\n")+len("k\n")+len("held\n")+len("*\n")) {
		t.Errorf("copied %+v, want 5 files, 4 folders, 4 links", c)
	}
	for rel, want := range map[string]struct {
		text string
		mode fs.FileMode
	}{
		"calc.sh": {"echo $(($1 + $2))\n", 0o755}, "README.md": {"calc\n", 0o644}, "private/key": {"k\n", 0o600},
		"frozen/held.txt": {"held\n", 0o444}, ".toolgate/.gitignore": {"*\n", 0o644},
	} {
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || string(b) != want.text {
			t.Errorf("%s: %q %v", rel, b, err)
			continue
		}
		if got := mode(t, filepath.Join(dst, rel)); got != want.mode {
			t.Errorf("%s: mode %v, want %v", rel, got, want.mode)
		}
	}
	for rel, want := range map[string]fs.FileMode{"private": fs.ModeDir | 0o700, "frozen": fs.ModeDir | 0o555, "empty": fs.ModeDir | 0o750} {
		if got := mode(t, filepath.Join(dst, rel)); got != want {
			t.Errorf("%s: mode %v, want %v", rel, got, want)
		}
	}
	if info, err := os.Stat(filepath.Join(dst, "README.md")); err != nil || !info.ModTime().Equal(old) {
		t.Errorf("README.md's time was not kept: %v %v", info.ModTime(), err)
	}
	for name, target := range links {
		path := filepath.Join(dst, name)
		if mode(t, path)&fs.ModeSymlink == 0 {
			t.Errorf("%s is no symlink in the copy: %v", name, mode(t, path))
			continue
		}
		if got, err := os.Readlink(path); err != nil || got != target {
			t.Errorf("%s -> %q (%v), want -> %q", name, got, err, target)
		}
	}
}

// A symlink is never followed: not to a file out of the tree, not into a folder
// out of it. What they point at never gets into the copy.
func TestCopyTreeNeverFollowsASymlink(t *testing.T) {
	outside := t.TempDir()
	write(t, outside, "secret", "do-not-leak\n", 0o644)
	write(t, outside, "dir/also-secret", "do-not-leak\n", 0o644)
	src, dst := t.TempDir(), t.TempDir()
	write(t, src, "ok", "ok\n", 0o644)
	for name, target := range map[string]string{"file": filepath.Join(outside, "secret"), "dir": filepath.Join(outside, "dir")} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := CopyTree(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(dst, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if b, _ := os.ReadFile(path); strings.Contains(string(b), "do-not-leak") {
				t.Errorf("%s holds what a symlink pointed at", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if mode(t, filepath.Join(dst, "dir"))&fs.ModeSymlink == 0 || mode(t, filepath.Join(dst, "file"))&fs.ModeSymlink == 0 {
		t.Error("a symlink was not copied as one")
	}
}

// FIFOs, sockets and devices are left out and counted; the rest of the tree is
// copied.
func TestCopyTreeSkipsSpecialFiles(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, src, "a/file", "x\n", 0o644)
	if err := syscall.Mkfifo(filepath.Join(src, "a", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock, err := net.Listen("unix", filepath.Join(src, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sock.Close() }()
	want := []string{"a/fifo (a FIFO)", "sock (a socket)"}
	if os.Geteuid() == 0 {
		// Only root makes a device: /dev/null's numbers.
		if err := syscall.Mknod(filepath.Join(src, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatal(err)
		}
		want = append(want, "null (a character device)")
	}
	c, err := CopyTree(context.Background(), src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if c.Files != 1 || c.Skipped != len(want) {
		t.Errorf("copied %+v, want 1 file and %d left out", c, len(want))
	}
	skipped := strings.Join(c.SkippedPaths, "|")
	for _, w := range want {
		if !strings.Contains(skipped, w) {
			t.Errorf("skipped %q lacks %q", skipped, w)
		}
	}
	for _, rel := range []string{"a/fifo", "sock", "null"} {
		if _, err := os.Lstat(filepath.Join(dst, rel)); !os.IsNotExist(err) {
			t.Errorf("%s is in the copy: %v", rel, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a", "file")); err != nil || string(b) != "x\n" {
		t.Errorf("a/file: %q %v", b, err)
	}
}

// A tree larger than the claim holds is refused before anything is written, and
// says what to change.
func TestCopyTreeRefusesATreeLargerThanTheClaim(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, src, "big", strings.Repeat("x", 4096), 0o644)
	_, err := copyTree(context.Background(), src, dst, func(string) (int64, error) { return 1000, nil })
	if KindOf(err) != FailureNoSpace || !strings.Contains(fmt.Sprint(err), "4096 bytes of files and the claim has 1000 bytes free") ||
		!strings.Contains(fmt.Sprint(err), "spec.workspace.volumeClaim.storage") {
		t.Fatalf("err %v (%s)", err, KindOf(err))
	}
	if entries, _ := os.ReadDir(dst); len(entries) > 0 {
		t.Errorf("the claim holds %v after a refused copy", entries)
	}
}

// A copy pod's request copies its source mount into its claim, and its result
// fits a termination message however much was left out.
func TestRunCopyReportsWithinATerminationMessage(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, src, "f", "f\n", 0o644)
	for i := range 300 {
		if err := syscall.Mkfifo(filepath.Join(src, fmt.Sprintf("fifo-with-a-long-name-%03d", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := Run(context.Background(), []byte(`{"op":"copy"}`), Mounts{Claim: dst, CopySource: src}, nil)
	if res.Kind != "" || res.Copied == nil || res.Copied.Files != 1 || res.Copied.Skipped != 300 {
		t.Fatalf("result %+v", res)
	}
	msg := res.Encode()
	var back Result
	if len(msg) > terminationMaxSize || json.Unmarshal(msg, &back) != nil || back.Copied.Skipped != 300 || len(back.Copied.SkippedPaths) == 0 {
		t.Fatalf("termination message of %d bytes: %s", len(msg), msg)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "f\n" {
		t.Fatalf("the claim's f: %q %v", b, err)
	}
	if res := Run(context.Background(), []byte(`{"op":"copy"}`), Mounts{Claim: dst, CopySource: filepath.Join(src, "missing")}, nil); res.Kind == "" ||
		!strings.Contains(res.Message, "the workspace to copy cannot be opened") {
		t.Fatalf("a copy of nothing: %+v", res)
	}
}

// The claim copied into may hold entries already (a copy tried before, or a claim
// that was not empty): a symlink or a hardlink there to something outside the
// claim, at a name the copied tree also has, is replaced, never written through.
func TestCopyTreeNeverWritesThroughWhatTheClaimHeld(t *testing.T) {
	outside := t.TempDir()
	write(t, outside, "victim", "untouched\n", 0o644)
	write(t, outside, "dir/keep", "untouched\n", 0o644)
	src, dst := t.TempDir(), t.TempDir()
	write(t, src, "link-file", "attacker\n", 0o644)
	write(t, src, "link-dir/planted", "attacker\n", 0o644)
	write(t, src, "hard", "attacker\n", 0o644)
	if err := os.Symlink(filepath.Join(outside, "victim"), filepath.Join(dst, "link-file")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "dir"), filepath.Join(dst, "link-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(outside, "victim"), filepath.Join(dst, "hard")); err != nil {
		t.Skipf("no hardlink across these temp dirs: %v", err)
	}
	if _, err := CopyTree(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "victim")); err != nil || string(b) != "untouched\n" {
		t.Errorf("a file outside the claim was written through a link the claim held: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "dir", "planted")); !os.IsNotExist(err) {
		t.Errorf("a file was planted outside the claim through a symlinked folder: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "dir", "keep")); err != nil || string(b) != "untouched\n" {
		t.Errorf("outside dir/keep: %q %v", b, err)
	}
	for _, rel := range []string{"link-file", "hard", "link-dir/planted"} {
		if b, err := os.ReadFile(filepath.Join(dst, rel)); err != nil || string(b) != "attacker\n" {
			t.Errorf("the copy's %s: %q %v", rel, b, err)
		}
	}
	if !mode(t, filepath.Join(dst, "link-dir")).IsDir() {
		t.Error("link-dir is not a folder of the claim after the copy")
	}
}
