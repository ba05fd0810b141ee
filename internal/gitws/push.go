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
	refs, err := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{remote.URL}}).
		ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return Pushed{}, classify(remote, err)
	}
	for _, r := range refs {
		if r.Name() == branch {
			return Pushed{}, fail(FailureBranchExists, "%s already has branch %s (at %s): the push only creates a branch; name a new one in spec.workspace.git.push.branch", remote.URL, req.Branch, r.Hash())
		}
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
		return Pushed{}, classify(remote, err)
	}
	return Pushed{Commit: hash.String(), Branch: req.Branch, Files: len(c.Files)}, nil
}
