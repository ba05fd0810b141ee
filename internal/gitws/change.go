package gitws

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Change is an agent's change to a git workspace: the worktree as a tree, against
// the commit the workspace was cloned at.
type Change struct {
	// Base is the commit the workspace was cloned at.
	Base string `json:"base"`
	// Tree is the hash of the tree the worktree is now (toolgate's folder and
	// anything named .git left out). Equal to the base commit's tree when nothing
	// changed.
	Tree string `json:"tree"`
	// Files are the paths the change touches, in order.
	Files []string `json:"files,omitempty"`
	// Binary are the changed paths whose content is binary: a patch names them
	// but cannot carry their content.
	Binary []string `json:"binary,omitempty"`
	// Skipped are paths of the worktree that no commit can hold (a .git folder,
	// a device, a socket), left out of the change.
	Skipped []string `json:"skipped,omitempty"`
	// Diff is the change as a git diff (empty when nothing changed).
	Diff string `json:"-"`
}

// ComputeChange reads the worktree against base, writing no object anywhere: the
// git directory may be mounted read-only.
func ComputeChange(gitDir, worktree, base string) (Change, error) {
	repo, err := Open(gitDir, worktree)
	if err != nil {
		return Change{}, fail(FailureOther, "the workspace's git directory does not open: %v", err)
	}
	st := &overlay{base: repo.Storer, mem: memory.NewStorage()}
	return change(st, worktree, base)
}

func change(st storer.EncodedObjectStorer, worktree, base string) (Change, error) {
	baseCommit, err := object.GetCommit(st, plumbing.NewHash(base))
	if err != nil {
		return Change{}, fail(FailureOther, "the commit %s the workspace was cloned at is not in its git directory: %v", base, err)
	}
	baseTree, err := baseCommit.Tree()
	if err != nil {
		return Change{}, fail(FailureOther, "the tree of commit %s: %v", base, err)
	}
	var skipped []string
	// Every read goes through root: a folder or file the agent swaps for a link
	// while the change is read cannot take the reader out of the worktree.
	root, err := os.OpenRoot(worktree)
	if err != nil {
		return Change{}, fail(FailureOther, "opening the worktree: %v", err)
	}
	defer func() { _ = root.Close() }()
	treeHash, err := writeTree(st, root, "", &skipped)
	if err != nil {
		return Change{}, err
	}
	out := Change{Base: base, Tree: treeHash.String(), Skipped: skipped}
	if treeHash == baseTree.Hash {
		return out, nil
	}
	newTree, err := object.GetTree(st, treeHash)
	if err != nil {
		return Change{}, fail(FailureOther, "the worktree's tree: %v", err)
	}
	changes, err := object.DiffTree(baseTree, newTree)
	if err != nil {
		return Change{}, fail(FailureOther, "comparing the worktree with %s: %v", base, err)
	}
	patch, err := changes.Patch()
	if err != nil {
		return Change{}, fail(FailureOther, "the diff against %s: %v", base, err)
	}
	for _, fp := range patch.FilePatches() {
		from, to := fp.Files()
		name := ""
		if to != nil {
			name = to.Path()
		} else if from != nil {
			name = from.Path()
		}
		out.Files = append(out.Files, name)
		if fp.IsBinary() {
			out.Binary = append(out.Binary, name)
		}
	}
	var diff bytes.Buffer
	if err := patch.Encode(&diff); err != nil {
		return Change{}, fail(FailureOther, "writing the diff: %v", err)
	}
	out.Diff = diff.String()
	return out, nil
}

// MaxChangeFileBytes is the largest file a change carries: the change pod holds
// each new file in memory while it hashes it.
const MaxChangeFileBytes = 64 << 20

// uncommittable says why git would refuse name in a tree (and go-git's diff with
// it), or "": a folder named .git in any case or by its short name, a name with a
// control character or a backslash. The agent chooses the names; one it chose so
// must cost it that file, not the whole change.
func uncommittable(name string) string {
	trimmed := strings.TrimRight(name, ". ")
	switch {
	case strings.EqualFold(trimmed, ".git"), strings.EqualFold(trimmed, "git~1"):
		return "a .git folder"
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }):
		return "a control character or backslash in its name"
	}
	return ""
}

// openRegular opens the regular file name of root that Lstat saw as info: not
// blocking on a FIFO, and only if it is still that file. An entry swapped since
// (for a link, which os.Root would follow within root, or a FIFO) is not that
// file: why says so, as it says a file that cannot be opened is unreadable.
func openRegular(root *os.Root, name string, info os.FileInfo) (f *os.File, why string) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, "unreadable"
	}
	now, err := f.Stat()
	if err != nil || !now.Mode().IsRegular() || !os.SameFile(info, now) {
		_ = f.Close()
		return nil, "changed while it was read"
	}
	return f, ""
}

// readRegular reads the regular file name of root that Lstat saw as info
// (openRegular: a file swapped while the change is read is left out), at most
// MaxChangeFileBytes.
func readRegular(root *os.Root, name string, info os.FileInfo) ([]byte, string) {
	f, why := openRegular(root, name, info)
	if why != "" {
		return nil, why
	}
	defer func() { _ = f.Close() }()
	content, err := io.ReadAll(io.LimitReader(f, MaxChangeFileBytes+1))
	if err != nil {
		return nil, "unreadable"
	}
	if len(content) > MaxChangeFileBytes {
		return nil, fmt.Sprintf("over %d bytes", MaxChangeFileBytes)
	}
	return content, ""
}

// writeTree stores the tree of dir (rel inside the worktree) and the blobs it
// holds, and returns its hash.
func writeTree(st storer.EncodedObjectStorer, root *os.Root, rel string, skipped *[]string) (plumbing.Hash, error) {
	dirName := rel
	if dirName == "" {
		dirName = "."
	}
	dir, err := root.Open(filepath.FromSlash(dirName))
	var entries []os.DirEntry
	if err == nil {
		entries, err = dir.ReadDir(-1)
		_ = dir.Close()
	}
	switch {
	case err != nil && rel == "":
		return plumbing.ZeroHash, fail(FailureOther, "reading the worktree: %v", err)
	case err != nil:
		// Swapped for a link out of the worktree since it was seen, or unreadable:
		// left out, as an empty folder is.
		*skipped = append(*skipped, rel+" (unreadable)")
		return emptyTreeHash, nil
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	tree := &object.Tree{}
	for _, e := range entries {
		name := e.Name()
		p := path.Join(rel, name)
		if rel == "" && name == ToolgateDir {
			continue
		}
		if why := uncommittable(name); why != "" {
			*skipped = append(*skipped, p+" ("+why+")")
			continue
		}
		full := filepath.FromSlash(p)
		info, err := root.Lstat(full)
		if err != nil {
			*skipped = append(*skipped, p+" (unreadable)")
			continue
		}
		var entry object.TreeEntry
		switch m := info.Mode(); {
		case m.IsDir():
			h, err := writeTree(st, root, p, skipped)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			if h == emptyTreeHash {
				continue // git holds no empty folder
			}
			entry = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h}
		case m&os.ModeSymlink != 0:
			target, err := root.Readlink(full)
			if err != nil {
				*skipped = append(*skipped, p+" (unreadable)")
				continue
			}
			h, err := writeBlob(st, strings.NewReader(target), int64(len(target)))
			if err != nil {
				return plumbing.ZeroHash, err
			}
			entry = object.TreeEntry{Name: name, Mode: filemode.Symlink, Hash: h}
		case m.IsRegular() && info.Size() > MaxChangeFileBytes:
			*skipped = append(*skipped, fmt.Sprintf("%s (%d bytes, over %d)", p, info.Size(), MaxChangeFileBytes))
			continue
		case m.IsRegular():
			content, why := readRegular(root, full, info)
			if why != "" {
				*skipped = append(*skipped, p+" ("+why+")")
				continue
			}
			h, err := writeBlob(st, bytes.NewReader(content), int64(len(content)))
			if err != nil {
				return plumbing.ZeroHash, err
			}
			mode := filemode.Regular
			if m&0o111 != 0 {
				mode = filemode.Executable
			}
			entry = object.TreeEntry{Name: name, Mode: mode, Hash: h}
		default:
			*skipped = append(*skipped, p+" (not a file, folder or link)")
			continue
		}
		tree.Entries = append(tree.Entries, entry)
	}
	// git's order: names compared as if a folder's ended in "/".
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(tree.Entries, func(i, j int) bool { return key(tree.Entries[i]) < key(tree.Entries[j]) })
	obj := st.NewEncodedObject()
	if err := tree.Encode(obj); err != nil {
		return plumbing.ZeroHash, fail(FailureOther, "encoding the tree of %s: %v", p0(rel), err)
	}
	return st.SetEncodedObject(obj)
}

var emptyTreeHash = plumbing.NewHash("4b825dc642cb6eb9a060e54bf8d69288fbee4904")

func p0(rel string) string {
	if rel == "" {
		return "the worktree"
	}
	return rel
}

func writeBlob(st storer.EncodedObjectStorer, r io.Reader, size int64) (plumbing.Hash, error) {
	obj := st.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(size)
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, fail(FailureOther, "%v", err)
	}
	if _, err := io.Copy(w, r); err != nil {
		return plumbing.ZeroHash, fail(FailureOther, "reading a file of the worktree: %v", err)
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, fail(FailureOther, "%v", err)
	}
	return st.SetEncodedObject(obj)
}

// Mail is the change as one message in the format `git am` reads, with subject
// (the first line of the message) and body.
func Mail(c Change, commit, author, email, message string, date time.Time) string {
	message = strings.ReplaceAll(strings.TrimSpace(message), "\r", " ")
	subject, body, _ := strings.Cut(message, "\n")
	var b strings.Builder
	fmt.Fprintf(&b, "From %s Mon Sep 17 00:00:00 2001\n", commit)
	fmt.Fprintf(&b, "From: %s <%s>\n", author, email)
	fmt.Fprintf(&b, "Date: %s\n", date.UTC().Format(time.RFC1123Z))
	fmt.Fprintf(&b, "Subject: [PATCH] %s\n\n", strings.TrimSpace(subject))
	if body = strings.TrimSpace(body); body != "" {
		b.WriteString(mailBody(body) + "\n")
	}
	b.WriteString("---\n")
	b.WriteString(c.Diff)
	b.WriteString("-- \ntoolgate\n\n")
	return b.String()
}

// inBodyHeader is a line git am reads as a header when it opens the body.
var inBodyHeader = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]*:`)

// mailBody is a commit message's body as a mail body that git am takes as text
// only: the message (a task's goal, which its author wrote) must not carry a patch
// or an author of its own. A line git am would read as the start of a patch
// ("---", "diff -", "Index: "), an mbox separator, or a header at the body's start
// is indented by one space; scissors (">8", "8<", which git finds whatever the
// indentation) are cut apart.
func mailBody(body string) string {
	lines := strings.Split(body, "\n")
	for i, l := range lines {
		special := strings.HasPrefix(l, "---") || strings.HasPrefix(l, "diff -") || strings.HasPrefix(l, "Index: ") ||
			strings.HasPrefix(l, "From ") || strings.HasPrefix(l, ">From ") || (i == 0 && inBodyHeader.MatchString(l))
		l = strings.NewReplacer(">8", "> 8", "8<", "8 <").Replace(l)
		if special {
			l = " " + l
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}

// overlay stores new objects in memory and reads the rest from base, so that a
// change is computed without writing into a git directory mounted read-only.
type overlay struct {
	base storer.EncodedObjectStorer
	mem  *memory.Storage
}

func (o *overlay) NewEncodedObject() plumbing.EncodedObject { return o.mem.NewEncodedObject() }

func (o *overlay) SetEncodedObject(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	if o.base.HasEncodedObject(obj.Hash()) == nil {
		return obj.Hash(), nil
	}
	return o.mem.SetEncodedObject(obj)
}

func (o *overlay) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if obj, err := o.mem.EncodedObject(t, h); err == nil {
		return obj, nil
	}
	return o.base.EncodedObject(t, h)
}

func (o *overlay) IterEncodedObjects(t plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return o.base.IterEncodedObjects(t)
}

func (o *overlay) HasEncodedObject(h plumbing.Hash) error {
	if o.mem.HasEncodedObject(h) == nil {
		return nil
	}
	return o.base.HasEncodedObject(h)
}

func (o *overlay) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if n, err := o.mem.EncodedObjectSize(h); err == nil {
		return n, nil
	}
	return o.base.EncodedObjectSize(h)
}

func (o *overlay) AddAlternate(string) error { return nil }
