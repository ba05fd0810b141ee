package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/workspace"
)

// maxSymlinks bounds symlink resolution in the fallback resolver, like the kernel's
// limit of 40.
const maxSymlinks = 40

// Workspace is the folder every tool path is confined to.
//
// Paths are opened with openat2(2) relative to a descriptor of the root and
// RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS, so the kernel refuses any resolution that
// leaves the root, through "..", an absolute symlink or a symlink that points outside,
// at the moment of the open. Files are then changed only through descriptors and
// *at(2) calls on single names, so a symlink swapped in later cannot redirect them.
//
// On kernels without openat2 (ENOSYS, before Linux 5.6, or a seccomp profile that
// hides it) the runner falls back to resolving each component itself with Lstat and
// Readlink under the same rules, then opens the resolved path with O_NOFOLLOW. That
// fallback has a race window between the check and the open that openat2 does not;
// the container is still the sandbox, the check keeps honest mistakes inside.
type Workspace struct {
	// Root is the absolute, symlink-free path of the workspace.
	Root string
	// given is the root as configured, which absolute tool paths may also use.
	given string
	// fd is an O_PATH descriptor of Root.
	fd int
	// fallback is true when openat2 is unavailable.
	fallback bool
}

// OpenWorkspace opens the workspace at root.
func OpenWorkspace(root string) (*Workspace, error) {
	if !filepath.IsAbs(root) {
		abs, err := filepath.Abs(root)
		if err != nil {
			return nil, err
		}
		root = abs
	}
	given := filepath.Clean(root)
	real, err := filepath.EvalSymlinks(given)
	if err != nil {
		return nil, fmt.Errorf("workspace root %q: %w", given, err)
	}
	fd, err := unix.Open(real, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace root %q: %w", real, err)
	}
	w := &Workspace{Root: real, given: given, fd: fd}
	probe, err := w.openat2(".", unix.O_PATH|unix.O_DIRECTORY, 0)
	switch {
	case errors.Is(err, unix.ENOSYS):
		w.fallback = true
	case err != nil:
		_ = unix.Close(fd)
		return nil, fmt.Errorf("workspace root %q: %w", real, err)
	default:
		_ = unix.Close(probe)
	}
	return w, nil
}

// Close releases the root descriptor.
func (w *Workspace) Close() error { return unix.Close(w.fd) }

// Rel turns a tool path into a clean path relative to the root, by the one rule of
// internal/workspace (the root as configured and as resolved both name it); symlinks
// are checked when it is opened.
func (w *Workspace) Rel(p string) (string, error) {
	rel, err := workspace.Rel(p, w.given, w.Root)
	if err != nil {
		return "", exceptionf("%v; nothing was read or written", err)
	}
	return rel, nil
}

// open opens rel (relative to the root) confined to the workspace. Errors name the
// tool's path p.
func (w *Workspace) open(p, rel string, flags int, mode uint32) (int, error) {
	var fd int
	var err error
	if w.fallback {
		fd, err = w.openResolved(rel, flags, mode)
	} else {
		fd, err = w.openat2(rel, flags, mode)
	}
	if err != nil {
		return -1, pathError(p, err)
	}
	return fd, nil
}

// openFile opens rel for reading as an *os.File.
func (w *Workspace) openFile(p, rel string) (*os.File, error) {
	fd, err := w.open(p, rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(w.Root, rel)), nil
}

func (w *Workspace) openat2(rel string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat2(w.fd, rel, &how)
		// EAGAIN: a concurrent rename made the kernel unsure that ".." stayed
		// beneath the root; the man page says to retry.
		if (errors.Is(err, unix.EAGAIN) && attempt < 8) || errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

// openResolved is the fallback for kernels without openat2: resolve rel component by
// component under RESOLVE_BENEATH's rules, then open the result without following a
// final symlink.
func (w *Workspace) openResolved(rel string, flags int, mode uint32) (int, error) {
	resolved, err := w.resolve(rel)
	if err != nil {
		return -1, err
	}
	for {
		fd, err := unix.Openat(w.fd, resolved, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

// resolve follows rel's symlinks by hand and returns an equivalent path relative to
// the root with no symlinks in it (as of now). Like RESOLVE_BENEATH it refuses
// absolute symlinks and any ".." that would leave the root (EXDEV). Components that do
// not exist yet are kept as they are, so the open can create them or fail ENOENT.
func (w *Workspace) resolve(rel string) (string, error) {
	pending := splitPath(rel)
	resolved := ""
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if resolved == "" {
				return "", unix.EXDEV
			}
			resolved = parentOf(resolved)
			continue
		}
		next := path.Join(resolved, c)
		fi, err := os.Lstat(filepath.Join(w.Root, next))
		if errors.Is(err, fs.ErrNotExist) {
			resolved = next
			continue
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", unix.ELOOP
		}
		target, err := os.Readlink(filepath.Join(w.Root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			return "", unix.EXDEV
		}
		pending = append(splitPath(target), pending...)
	}
	if resolved == "" {
		return ".", nil
	}
	return resolved, nil
}

func splitPath(p string) []string { return strings.Split(p, "/") }

func parentOf(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}

// realPath returns the absolute path of the directory or file rel resolves to, after
// checking that it stays inside the workspace.
func (w *Workspace) realPath(p, rel string) (string, error) {
	if w.fallback {
		resolved, err := w.resolve(rel)
		if err != nil {
			return "", pathError(p, err)
		}
		return filepath.Join(w.Root, resolved), nil
	}
	fd, err := w.open(p, rel, unix.O_PATH, 0)
	if err != nil {
		return "", err
	}
	defer func() { _ = unix.Close(fd) }()
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err == nil && (real == w.Root || strings.HasPrefix(real, w.Root+"/")) {
		return real, nil
	}
	// Without /proc the descriptor cannot name itself: resolve by hand.
	resolved, err := w.resolve(rel)
	if err != nil {
		return "", pathError(p, err)
	}
	return filepath.Join(w.Root, resolved), nil
}

// mkdirAll creates the directory rel and its parents inside the workspace. Each
// directory is created with mkdirat on a confined descriptor of its parent, so a
// symlink cannot send the creation outside.
func (w *Workspace) mkdirAll(p, rel string) error {
	if rel == "." {
		return nil
	}
	parent := "."
	for _, c := range splitPath(rel) {
		cur := path.Join(parent, c)
		fd, err := w.open(p, cur, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err == nil {
			_ = unix.Close(fd)
			parent = cur
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		pfd, err := w.open(p, parent, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(pfd, c, 0o755)
		_ = unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return pathError(p, err)
		}
		parent = cur
	}
	return nil
}

// pathError turns a system error about the tool path p into a clear Exception that
// still matches the system error with errors.Is.
func pathError(p string, err error) error {
	var te *toolError
	if errors.As(err, &te) {
		return err
	}
	var msg string
	switch {
	case errors.Is(err, unix.EXDEV):
		msg = fmt.Sprintf("path %q resolves outside the workspace (through \"..\", an absolute symlink or a symlink pointing outside); nothing was read or written", p)
	case errors.Is(err, unix.ELOOP):
		msg = fmt.Sprintf("path %q has too many levels of symlinks or goes through a /proc magic link; nothing was read or written", p)
	case errors.Is(err, unix.ENOENT):
		msg = fmt.Sprintf("path %q does not exist", p)
	case errors.Is(err, unix.ENOTDIR):
		msg = fmt.Sprintf("path %q: a component of the path is not a directory", p)
	case errors.Is(err, unix.EISDIR):
		msg = fmt.Sprintf("path %q is a directory", p)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		msg = fmt.Sprintf("path %q: permission denied", p)
	case errors.Is(err, unix.EROFS):
		msg = fmt.Sprintf("path %q: the workspace is mounted read-only", p)
	default:
		msg = fmt.Sprintf("path %q: %v", p, err)
	}
	return &toolError{kind: protocol.KindException, msg: msg, cause: err}
}
