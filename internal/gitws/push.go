package gitws

import (
	"context"
	"errors"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

// PushRequest is a change to push as one commit on a new branch.
type PushRequest struct {
	URL    string
	Branch string
	// Base is the commit the workspace was cloned at: the new commit's parent.
	Base string
	// Tree is the tree the change was shown (and approved) as: the push refuses a
	// worktree that is no longer that tree.
	Tree    string
	Author  string
	Email   string
	Message string
	Date    time.Time
}

// Pushed is what a push made.
type Pushed struct {
	Commit string `json:"commit"`
	Branch string `json:"branch"`
	Files  int    `json:"files"`
}

// Push commits the worktree on top of the base commit and pushes that commit to a
// branch the remote does not have yet. It never force-pushes and never moves a
// branch that exists.
func Push(ctx context.Context, req PushRequest, creds *Credentials, gitDir, worktree string) (Pushed, error) {
	remote, err := ParseRemote(req.URL)
	if err != nil {
		return Pushed{}, err
	}
	branch := plumbing.NewBranchReferenceName(req.Branch)
	if err := branch.Validate(); err != nil || req.Branch == "" {
		return Pushed{}, fail(FailureOther, "branch %q is not a valid branch name", req.Branch)
	}
	repo, err := Open(gitDir, worktree)
	if err != nil {
		return Pushed{}, fail(FailureOther, "the workspace's git directory does not open: %v", err)
	}
	c, err := change(repo.Storer, worktree, req.Base)
	if err != nil {
		return Pushed{}, err
	}
	if c.Tree != req.Tree {
		return Pushed{}, fail(FailureChanged, "the workspace is tree %s now, not the tree %s that was shown for approval: nothing was pushed", c.Tree, req.Tree)
	}
	if len(c.Files) == 0 {
		return Pushed{}, fail(FailureOther, "the workspace has no change against %s: nothing to push", req.Base)
	}
	auth, err := creds.auth(remote)
	if err != nil {
		return Pushed{}, err
	}
	if at, err := remoteBranch(ctx, remote, auth, branch); err != nil {
		return Pushed{}, err
	} else if !at.IsZero() {
		return Pushed{}, branchExists(remote, req.Branch, at)
	}
	sig := object.Signature{Name: req.Author, Email: req.Email, When: req.Date}
	commit := &object.Commit{
		Author: sig, Committer: sig, Message: req.Message,
		TreeHash: plumbing.NewHash(c.Tree), ParentHashes: []plumbing.Hash{plumbing.NewHash(req.Base)},
	}
	obj := repo.Storer.NewEncodedObject()
	if err := commit.Encode(obj); err != nil {
		return Pushed{}, fail(FailureOther, "encoding the commit: %v", err)
	}
	hash, err := repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return Pushed{}, fail(FailureOther, "storing the commit: %v", err)
	}
	local := plumbing.ReferenceName("refs/toolgate/push")
	if err := repo.Storer.SetReference(plumbing.NewHashReference(local, hash)); err != nil {
		return Pushed{}, fail(FailureOther, "%v", err)
	}
	err = repo.PushContext(ctx, &git.PushOptions{
		RemoteURL: remote.URL,
		RefSpecs:  []config.RefSpec{config.RefSpec(local.String() + ":" + branch.String())},
		Auth:      auth,
	})
	if err != nil {
		// The refspec has no "+": a branch another pusher made since the look above
		// fails the push, which then says so.
		if at, listErr := remoteBranch(ctx, remote, auth, branch); listErr == nil && !at.IsZero() && at != hash {
			return Pushed{}, branchExists(remote, req.Branch, at)
		}
		return Pushed{}, classify(remote, err)
	}
	return Pushed{Commit: hash.String(), Branch: req.Branch, Files: len(c.Files)}, nil
}

// remoteBranch returns the commit branch is at on remote, the zero hash when the
// remote has no such branch.
func remoteBranch(ctx context.Context, remote Remote, auth transport.AuthMethod, branch plumbing.ReferenceName) (plumbing.Hash, error) {
	refs, err := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{remote.URL}}).
		ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return plumbing.ZeroHash, classify(remote, err)
	}
	for _, r := range refs {
		if r.Name() == branch {
			return r.Hash(), nil
		}
	}
	return plumbing.ZeroHash, nil
}

func branchExists(remote Remote, branch string, at plumbing.Hash) error {
	return fail(FailureBranchExists, "%s already has branch %s (at %s): the push only creates a branch; name a new one in spec.workspace.git.push.branch", remote.URL, branch, at)
}
