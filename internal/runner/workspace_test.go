package runner

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/protocol"
)

// confinedWorkspace builds a workspace with symlinks inside and out, and opens it
// with openat2 or with the fallback resolver.
func confinedWorkspace(t *testing.T, fallback bool) (*Workspace, string) {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(ws, "dir/sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, content := range map[string]string{filepath.Join(ws, "dir/f.txt"): "in", filepath.Join(outside, "secret"): "out"} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, dest := range map[string]string{
		"in-rel":       "dir/f.txt",
		"dir/sub/up":   "../f.txt",
		"in-dirlink":   "dir",
		"out-abs":      filepath.Join(outside, "secret"),
		"out-rel":      "../outside/secret",
		"out-dir":      "../outside",
		"dir/deep-out": "../../outside",
		"loop":         "loop",
		"abs-inside":   filepath.Join(ws, "dir/f.txt"),
		"abs-proc":     "/proc/self/root/etc/passwd",
	} {
		if err := os.Symlink(dest, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := OpenWorkspace(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	if fallback {
		w.fallback = true
	} else if w.fallback {
		t.Skip("this kernel has no openat2")
	}
	return w, outside
}

func TestConfinement(t *testing.T) {
	cases := []struct {
		path string
		want error // nil: opens; else the errno the open fails with
	}{
		{"dir/f.txt", nil},
		{"in-rel", nil},
		{"dir/sub/up", nil},
		{"in-dirlink/f.txt", nil},
		{"dir/sub/../f.txt", nil},
		{"out-abs", unix.EXDEV},
		{"out-rel", unix.EXDEV},
		{"out-dir/secret", unix.EXDEV},
		{"dir/deep-out/secret", unix.EXDEV},
		// RESOLVE_BENEATH refuses every absolute symlink, even one pointing inside.
		{"abs-inside", unix.EXDEV},
		{"abs-proc", unix.EXDEV},
		{"loop", unix.ELOOP},
		{"missing", unix.ENOENT},
	}
	for _, fallback := range []bool{false, true} {
		name := "openat2"
		if fallback {
			name = "fallback"
		}
		t.Run(name, func(t *testing.T) {
			w, _ := confinedWorkspace(t, fallback)
			for _, tc := range cases {
				fd, err := w.open(tc.path, tc.path, unix.O_RDONLY, 0)
				if err == nil {
					_ = unix.Close(fd)
				}
				if tc.want == nil && err != nil {
					t.Errorf("%s: %v, want it to open", tc.path, err)
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Errorf("%s: error %v, want %v", tc.path, err, tc.want)
				}
				if tc.want != nil && errorKind(err) != protocol.KindException {
					t.Errorf("%s: kind %s", tc.path, errorKind(err))
				}
			}
		})
	}
}

func TestRel(t *testing.T) {
	w, _ := confinedWorkspace(t, false)
	for _, tc := range []struct {
		in, want string
		fails    bool
	}{
		{in: "", want: "."},
		{in: "a/./b/", want: "a/b"},
		{in: "a/../b", want: "b"},
		{in: w.Root, want: "."},
		{in: w.Root + "/dir/f.txt", want: "dir/f.txt"},
		{in: "..", fails: true},
		{in: "a/../../b", fails: true},
		{in: "/etc/passwd", fails: true},
		{in: w.Root + "-other/x", fails: true},
		{in: "a\x00b", fails: true},
	} {
		got, err := w.Rel(tc.in)
		if (err != nil) != tc.fails || (!tc.fails && got != tc.want) {
			t.Errorf("Rel(%q) = %q, %v; want %q, fails %v", tc.in, got, err, tc.want, tc.fails)
		}
	}
}

func TestWritesStayInside(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		w, outside := confinedWorkspace(t, fallback)
		for _, p := range []string{"out-dir/new/x.txt", "dir/deep-out/x.txt", "out-dir/x.txt"} {
			tgt := fileTarget{path: p, rel: p, dir: filepath.Dir(p), base: filepath.Base(p)}
			if err := w.writeAtomic(tgt, []byte("pwned"), 0o644); !errors.Is(err, unix.EXDEV) {
				t.Errorf("fallback %v: writeAtomic %s: %v, want EXDEV", fallback, p, err)
			}
		}
		entries, _ := os.ReadDir(outside)
		if len(entries) != 1 {
			t.Errorf("fallback %v: something was created outside: %v", fallback, entries)
		}
		tgt := fileTarget{path: "in-dirlink/new/n.txt", rel: "in-dirlink/new/n.txt", dir: "in-dirlink/new", base: "n.txt"}
		if err := w.writeAtomic(tgt, []byte("ok"), 0o600); err != nil {
			t.Fatalf("fallback %v: write through an inside symlink: %v", fallback, err)
		}
		fi, err := os.Stat(filepath.Join(w.Root, "dir/new/n.txt"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("fallback %v: written file: %v, %v", fallback, fi, err)
		}
		_ = os.RemoveAll(filepath.Join(w.Root, "dir/new"))
	}
}
