package runner

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/tools"
)

const (
	// maxGlobResults and maxListEntries cap what glob and list_dir print.
	maxGlobResults = 1000
	maxListEntries = 1000
	// defaultGrepResults is grep's cap without maxResults; maxGrepResults is the cap
	// maxResults cannot exceed.
	defaultGrepResults = 100
	maxGrepResults     = 1000
	// grepLineBytes is how much of one line grep matches against.
	grepLineBytes = 64 << 10
	// grepShowBytes is how much of a matching line grep prints.
	grepShowBytes = 500
)

// skipDir reports whether glob and grep skip the directory at rel (relative to the
// workspace): the runner's own .toolgate folder and every .git folder, which hold no
// source and would drown results.
func skipDir(rel string) bool {
	return rel == path.Dir(ArtifactDir) || path.Base(rel) == ".git"
}

// walk visits everything under base (an absolute path inside the workspace, from
// realPath; the tool gave it as p), in lexical order, without following symlinks,
// skipping skipDir folders. fn gets workspace-relative paths; it may return fs.SkipDir
// or fs.SkipAll.
func (ic *invocationContext) walk(ctx context.Context, p, base string, fn func(rel string, d fs.DirEntry) error) error {
	return filepath.WalkDir(base, func(abs string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return stopped(ctx, ic.inv.Tool)
		}
		if err != nil {
			if abs == base {
				return pathError(p, err)
			}
			// An unreadable folder is left out, as find and grep -r do.
			return nil
		}
		rel, err := filepath.Rel(ic.ws.Root, abs)
		if err != nil {
			return exceptionf("path %q: %v", p, err)
		}
		if d.IsDir() && abs != base && skipDir(rel) {
			return fs.SkipDir
		}
		return fn(rel, d)
	})
}

// globSegments splits a glob pattern into its "/"-separated segments and checks each.
func globSegments(pattern string) ([]string, error) {
	segs := strings.Split(pattern, "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return nil, exceptionf("glob pattern %q has an empty, \".\" or \"..\" segment", pattern)
		}
		if _, err := path.Match(s, ""); err != nil {
			return nil, exceptionf("glob pattern %q is malformed at %q: %v", pattern, s, err)
		}
	}
	return segs, nil
}

// matchGlob reports whether the path segments name match the pattern segments pat, where
// "**" matches any number of segments (zero included) and other segments match one
// segment as path.Match does.
func matchGlob(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchGlob(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// globCouldMatchBelow reports whether anything under the directory dir could match pat,
// so that the walk does not descend where nothing can match.
func globCouldMatchBelow(pat, dir []string) bool {
	for i, s := range dir {
		if i >= len(pat) {
			return false
		}
		if pat[i] == "**" {
			return true
		}
		if ok, _ := path.Match(pat[i], s); !ok {
			return false
		}
	}
	return true
}

// relSegments splits rel (relative to base) into segments; "." has none.
func relSegments(base, rel string) []string {
	r := rel
	if base != "." {
		r = strings.TrimPrefix(strings.TrimPrefix(rel, base), "/")
	}
	if r == "" || r == "." {
		return nil
	}
	return strings.Split(r, "/")
}

// runGlob prints the workspace-relative paths (directories with a trailing "/") under
// path that match the pattern, which is relative to path and may use "**".
func runGlob(ctx context.Context, ic *invocationContext) error {
	var in tools.GlobInput
	if err := decodeInput(ic, &in); err != nil {
		return err
	}
	if in.Pattern == "" {
		return exceptionf("input field pattern of glob is empty")
	}
	basePath, pattern := in.Path, in.Pattern
	if path.IsAbs(pattern) {
		// An absolute pattern inside the workspace is relative to its root.
		rel, err := ic.ws.Rel(pattern)
		if err != nil {
			return err
		}
		basePath, pattern = "", rel
	}
	pat, err := globSegments(pattern)
	if err != nil {
		return err
	}
	baseRel, err := ic.ws.Rel(basePath)
	if err != nil {
		return err
	}
	realBase, err := ic.ws.realPath(basePath, baseRel)
	if err != nil {
		return err
	}
	walkBase, _ := filepath.Rel(ic.ws.Root, realBase)
	matches := 0
	err = ic.walk(ctx, basePath, realBase, func(rel string, d fs.DirEntry) error {
		segs := relSegments(walkBase, rel)
		if len(segs) == 0 {
			return nil
		}
		if matchGlob(pat, segs) {
			if matches == maxGlobResults {
				ic.res.ResultsCapped = true
				return fs.SkipAll
			}
			matches++
			if d.IsDir() {
				ic.out.printf("%s/\n", rel)
			} else {
				ic.out.printf("%s\n", rel)
			}
		}
		if d.IsDir() && !globCouldMatchBelow(pat, segs) {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return err
	}
	ic.res.Matches = matches
	switch {
	case ic.res.ResultsCapped:
		ic.out.printf("[results capped at %d paths; narrow the pattern or the path]\n", maxGlobResults)
	case matches == 0:
		ic.out.printf("[no paths match %q]\n", in.Pattern)
	}
	return nil
}

// runGrep prints the lines that match an RE2 pattern as path:line:text, in files under
// path (a file or a folder) whose name matches include. Binary files are skipped, and
// so are .git and .toolgate folders. Lines are matched on their first 64 KiB and shown
// up to 500 bytes.
func runGrep(ctx context.Context, ic *invocationContext) error {
	var in tools.GrepInput
	if err := decodeInput(ic, &in); err != nil {
		return err
	}
	if in.Pattern == "" {
		return exceptionf("input field pattern of grep is empty")
	}
	re, err := regexp.Compile(in.Pattern)
	if err != nil {
		return exceptionf("input field pattern of grep is not a valid RE2 regular expression: %v", err)
	}
	var include []string
	if in.Include != "" {
		if include, err = globSegments(in.Include); err != nil {
			return err
		}
	}
	limit := in.MaxResults
	if limit <= 0 {
		limit = defaultGrepResults
	}
	limit = min(limit, maxGrepResults)
	baseRel, err := ic.ws.Rel(in.Path)
	if err != nil {
		return err
	}
	realBase, err := ic.ws.realPath(in.Path, baseRel)
	if err != nil {
		return err
	}
	walkBase, _ := filepath.Rel(ic.ws.Root, realBase)

	matches, binaries := 0, 0
	searchFile := func(rel string) error {
		f, err := ic.ws.openFile(rel, rel)
		if err != nil {
			return nil // vanished or unreadable: left out, as grep -r does
		}
		defer func() { _ = f.Close() }()
		br := bufio.NewReaderSize(f, 64<<10)
		if head, _ := br.Peek(binarySniffBytes); isBinary(head) {
			binaries++
			return nil
		}
		for n := 1; ; n++ {
			line, _, err := nextLine(br, grepLineBytes)
			if len(line) > 0 && re.Match(line) {
				if matches == limit {
					ic.res.ResultsCapped = true
					return fs.SkipAll
				}
				matches++
				shown, cut := line, ""
				if len(shown) > grepShowBytes {
					shown, cut = shown[:grepShowBytes], " …[line cut]"
				}
				ic.out.printf("%s:%d:%s%s\n", rel, n, shown, cut)
			}
			if err != nil {
				return nil
			}
		}
	}
	included := func(rel string) bool {
		if include == nil {
			return true
		}
		if len(include) == 1 {
			ok, _ := path.Match(include[0], path.Base(rel))
			return ok
		}
		return matchGlob(include, relSegments(walkBase, rel))
	}

	err = ic.walk(ctx, in.Path, realBase, func(rel string, d fs.DirEntry) error {
		if !d.Type().IsRegular() || !included(rel) {
			return nil
		}
		return searchFile(rel)
	})
	if err != nil {
		return err
	}
	ic.res.Matches = matches
	switch {
	case ic.res.ResultsCapped:
		ic.out.printf("[results capped at %d matching lines; narrow the pattern, path or include, or raise maxResults (at most %d)]\n", limit, maxGrepResults)
	case matches == 0:
		ic.out.printf("[no lines match %q]\n", in.Pattern)
	}
	if binaries > 0 {
		ic.out.printf("[skipped %d binary files]\n", binaries)
	}
	return nil
}

// runListDir prints a directory's entries sorted by name: folders as "name/", files as
// "name  (N bytes)", symlinks as "name -> target".
func runListDir(_ context.Context, ic *invocationContext) error {
	var in tools.ListDirInput
	if err := decodeInput(ic, &in); err != nil {
		return err
	}
	rel, err := ic.ws.Rel(in.Path)
	if err != nil {
		return err
	}
	fd, err := ic.ws.open(in.Path, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOTDIR) {
		return exceptionf("path %q is not a directory: use read_file", in.Path)
	}
	if err != nil {
		return err
	}
	dir := os.NewFile(uintptr(fd), rel)
	defer func() { _ = dir.Close() }()
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return pathError(in.Path, err)
	}
	sortEntries(entries)
	for i, e := range entries {
		if i == maxListEntries {
			ic.res.ResultsCapped = true
			ic.out.printf("[listing capped at %d of %d entries; use glob to narrow it]\n", maxListEntries, len(entries))
			break
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			ic.out.printf("%s  (unreadable: %v)\n", e.Name(), err)
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			ic.out.printf("%s/\n", e.Name())
		case unix.S_IFLNK:
			dest, _ := readlinkat(fd, e.Name())
			ic.out.printf("%s -> %s\n", e.Name(), dest)
		default:
			ic.out.printf("%s  (%d bytes)\n", e.Name(), st.Size)
		}
	}
	ic.res.Matches = len(entries)
	if len(entries) == 0 {
		ic.out.printf("[empty directory]\n")
	}
	return nil
}

func sortEntries(entries []fs.DirEntry) {
	// ReadDir on a descriptor returns directory order; sort by name for stable output.
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
}
