package gitws

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Cloned is what a clone resolved.
type Cloned struct {
	// Commit is the full hash checked out.
	Commit string `json:"commit"`
	// Ref is the branch or tag the revision named, empty for a commit.
	Ref string `json:"ref,omitempty"`
}

var hexRevision = regexp.MustCompile(`^[0-9a-f]{4,40}$`)

// Open opens the repository of a claim's layout.
func Open(gitDir, worktree string) (*git.Repository, error) {
	st := filesystem.NewStorage(osfs.New(gitDir), cache.NewObjectLRUDefault())
	return git.Open(st, osfs.New(worktree))
}

// Clone clones url at revision (a branch, a tag, a commit, or HEAD or empty for
// the default branch) into worktree, with its git directory in gitDir. Branches
// and tags are cloned shallow (depth 1, that ref only); a commit needs the
// history that holds it. A git directory whose ClonedMarker was written is a
// clone already made (a pod that cloned and was lost before it reported): the
// marker's commit is the result and nothing is overwritten. Otherwise whatever an
// attempt left (a fetch whose checkout failed or was cut short holds a HEAD, but
// not the worktree) is removed first.
func Clone(ctx context.Context, rawURL, revision string, creds *Credentials, worktree, gitDir string) (Cloned, error) {
	remote, err := ParseRemote(rawURL)
	if err != nil {
		return Cloned{}, err
	}
	if done, ok := readClonedMarker(gitDir); ok {
		return done, nil
	}
	for _, dir := range []string{worktree, gitDir} {
		if err := emptyDir(dir); err != nil {
			return Cloned{}, fail(FailureOther, "cannot clear %s before cloning: %v", dir, err)
		}
	}
	auth, err := creds.auth(remote)
	if err != nil {
		return Cloned{}, err
	}
	refs, err := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{remote.URL}}).
		ListContext(ctx, &git.ListOptions{Auth: auth})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return Cloned{}, fail(FailureRevisionNotFound, "%s is an empty repository: it has no commit to clone", remote.URL)
	}
	if err != nil {
		return Cloned{}, classify(remote, err)
	}
	opts := &git.CloneOptions{URL: remote.URL, Auth: auth, Tags: git.NoTags}
	var commit string
	ref := findRef(refs, revision)
	switch {
	case revision == "" || revision == "HEAD":
		opts.Depth, opts.SingleBranch = 1, true
	case ref != "":
		opts.ReferenceName, opts.Depth, opts.SingleBranch = ref, 1, true
	case hexRevision.MatchString(revision):
		commit = revision
	default:
		return Cloned{}, fail(FailureRevisionNotFound, "revision %q is not a branch, tag or commit of %s (%s)", revision, remote.URL, refList(refs))
	}
	st := filesystem.NewStorage(osfs.New(gitDir), cache.NewObjectLRUDefault())
	repo, err := git.CloneContext(ctx, st, osfs.New(worktree), opts)
	if err != nil {
		return Cloned{}, classify(remote, err)
	}
	if commit != "" {
		hash, err := repo.ResolveRevision(plumbing.Revision(commit))
		if err != nil {
			return Cloned{}, fail(FailureRevisionNotFound, "revision %q is not a branch or tag of %s, and no commit of its history starts with it", revision, remote.URL)
		}
		wt, err := repo.Worktree()
		if err != nil {
			return Cloned{}, fail(FailureOther, "%v", err)
		}
		if err := wt.Checkout(&git.CheckoutOptions{Hash: *hash, Force: true}); err != nil {
			return Cloned{}, fail(FailureOther, "cannot check out commit %s: %v", hash, err)
		}
	}
	// go-git leaves a .git file naming the git directory in the worktree; the
	// tools must not learn where it is, and nothing needs the file.
	if err := os.Remove(filepath.Join(worktree, ".git")); err != nil && !os.IsNotExist(err) {
		return Cloned{}, fail(FailureOther, "%v", err)
	}
	head, err := repo.Head()
	if err != nil {
		return Cloned{}, fail(FailureOther, "the clone has no HEAD: %v", err)
	}
	out := Cloned{Commit: head.Hash().String()}
	switch {
	case ref != "":
		out.Ref = ref.String()
	case commit == "":
		out.Ref = refOf(head.Name())
	}
	// Written last: only a clone whose worktree was checked out whole has one.
	if err := os.WriteFile(filepath.Join(gitDir, ClonedMarker), []byte(out.Commit+"\n"+out.Ref+"\n"), 0o444); err != nil {
		return Cloned{}, fail(FailureOther, "recording the clone: %v", err)
	}
	return out, nil
}

// ClonedMarker is the file of the git directory that records a finished clone:
// its commit and ref, one a line.
const ClonedMarker = "toolgate-cloned"

func readClonedMarker(gitDir string) (Cloned, bool) {
	b, err := os.ReadFile(filepath.Join(gitDir, ClonedMarker))
	if err != nil {
		return Cloned{}, false
	}
	commit, ref, _ := strings.Cut(strings.TrimSuffix(string(b), "\n"), "\n")
	if !hexRevision.MatchString(commit) || len(commit) != 40 {
		return Cloned{}, false
	}
	return Cloned{Commit: commit, Ref: ref}, true
}

// findRef is the branch or tag the revision names among the remote's refs.
func findRef(refs []*plumbing.Reference, revision string) plumbing.ReferenceName {
	if revision == "" || revision == "HEAD" {
		return ""
	}
	for _, want := range []plumbing.ReferenceName{plumbing.ReferenceName(revision), plumbing.NewBranchReferenceName(revision), plumbing.NewTagReferenceName(revision)} {
		if !want.IsBranch() && !want.IsTag() {
			continue
		}
		for _, r := range refs {
			if r.Name() == want {
				return want
			}
		}
	}
	return ""
}

// refList names some of the remote's branches and tags, for an error.
func refList(refs []*plumbing.Reference) string {
	var branches, tags []string
	for _, r := range refs {
		switch {
		case r.Name().IsBranch():
			branches = append(branches, r.Name().Short())
		case r.Name().IsTag():
			tags = append(tags, r.Name().Short())
		}
	}
	slices.Sort(branches)
	slices.Sort(tags)
	cut := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		if len(l) > 10 {
			return strings.Join(l[:10], ", ") + fmt.Sprintf(" and %d more", len(l)-10)
		}
		return strings.Join(l, ", ")
	}
	return "branches: " + cut(branches) + "; tags: " + cut(tags)
}

func refOf(name plumbing.ReferenceName) string {
	if name.IsBranch() || name.IsTag() {
		return name.String()
	}
	return ""
}

// emptyDir removes what dir holds, creating it when missing.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o775); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
