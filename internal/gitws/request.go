package gitws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"time"
)

// Paths inside toolgate's workspace pods (clone, change, push and copy): the
// whole claim, the credentials Secret when there is one, and for a copy the
// workspace copied from (the other task's claim, read-only, as its tools see it).
const (
	PodClaimRoot       = "/claim"
	PodCredentialsDir  = "/toolgate-git-credentials"
	PodCopySourceRoot  = "/copy-source"
	RequestEnv         = "TOOLGATE_GIT"
	MaxReportedFiles   = 50
	terminationMaxSize = 4096
)

// Operations of a workspace pod. Clone, change and push are git steps; copy
// copies another task's workspace into the claim (CopyTree) and needs no git.
const (
	OpClone  = "clone"
	OpChange = "change"
	OpPush   = "push"
	OpCopy   = "copy"
)

// Mounts are where a workspace pod's volumes are: the claim (PodClaimRoot), the
// credentials Secret ("" when none is mounted) and, for a copy, the workspace
// copied from (PodCopySourceRoot).
type Mounts struct {
	Claim, Credentials, CopySource string
}

// Request is what a git pod is asked to do, from RequestEnv.
type Request struct {
	Op       string `json:"op"`
	URL      string `json:"url,omitempty"`
	Revision string `json:"revision,omitempty"`
	// Base and Tree: the change's base commit, and for a push the approved tree.
	Base    string    `json:"base,omitempty"`
	Tree    string    `json:"tree,omitempty"`
	Branch  string    `json:"branch,omitempty"`
	Author  string    `json:"author,omitempty"`
	Email   string    `json:"email,omitempty"`
	Message string    `json:"message,omitempty"`
	Date    time.Time `json:"date,omitzero"`
}

// Result is what a git pod reports in its termination message.
type Result struct {
	Op string `json:"op"`
	// Kind and Message say why it failed; Kind is empty on success.
	Kind    FailureKind `json:"kind,omitempty"`
	Message string      `json:"message,omitempty"`
	Cloned  *Cloned     `json:"cloned,omitempty"`
	// Change, for OpChange: its diff went to stdout, DiffBytes long with
	// DiffSHA256, so that a reader can tell it got all of it.
	Change     *Change `json:"change,omitempty"`
	FileCount  int     `json:"fileCount,omitempty"`
	DiffBytes  int     `json:"diffBytes,omitempty"`
	DiffSHA256 string  `json:"diffSHA256,omitempty"`
	Pushed     *Pushed `json:"pushed,omitempty"`
	// Copied, for OpCopy: what was copied, and what was left out.
	Copied *Copied `json:"copied,omitempty"`
}

// Run carries out a request on the volumes at m, writing a change's diff to out.
func Run(ctx context.Context, raw []byte, m Mounts, out io.Writer) Result {
	var req Request
	if err := json.Unmarshal(raw, &req); err != nil {
		return Result{Kind: FailureOther, Message: fmt.Sprintf("%s does not hold a git request: %v", RequestEnv, err)}
	}
	res := Result{Op: req.Op}
	failed := func(err error) Result {
		res.Kind, res.Message = KindOf(err), err.Error()
		return res
	}
	worktree, gitDir := filepath.Join(m.Claim, WorktreeDir), filepath.Join(m.Claim, GitDir)
	switch req.Op {
	case OpCopy:
		// A copy task is no git task: its tools see the whole claim.
		c, err := CopyTree(ctx, m.CopySource, m.Claim)
		if err != nil {
			return failed(err)
		}
		res.Copied = &c
		return res
	case OpClone, OpPush:
		creds, err := LoadCredentials(m.Credentials)
		if err != nil {
			return failed(err)
		}
		if req.Op == OpClone {
			c, err := Clone(ctx, req.URL, req.Revision, creds, worktree, gitDir)
			if err != nil {
				return failed(err)
			}
			res.Cloned = &c
			return res
		}
		p, err := Push(ctx, PushRequest{URL: req.URL, Branch: req.Branch, Base: req.Base, Tree: req.Tree,
			Author: req.Author, Email: req.Email, Message: req.Message, Date: req.Date}, creds, gitDir, worktree)
		if err != nil {
			return failed(err)
		}
		res.Pushed = &p
		return res
	case OpChange:
		c, err := ComputeChange(gitDir, worktree, req.Base)
		if err != nil {
			return failed(err)
		}
		if _, err := io.WriteString(out, c.Diff); err != nil {
			return failed(fmt.Errorf("writing the diff: %w", err))
		}
		sum := sha256.Sum256([]byte(c.Diff))
		res.DiffBytes, res.DiffSHA256, res.FileCount = len(c.Diff), hex.EncodeToString(sum[:]), len(c.Files)
		res.Change = &c
		return res
	}
	return failed(fmt.Errorf("unknown git operation %q", req.Op))
}

// Encode is the result as a termination message: within the kubelet's 4096 bytes,
// the change's lists cut first.
func (r Result) Encode() []byte {
	if r.Change != nil {
		c := *r.Change
		for _, l := range []*[]string{&c.Files, &c.Binary, &c.Skipped} {
			if len(*l) > MaxReportedFiles {
				*l = (*l)[:MaxReportedFiles]
			}
		}
		r.Change = &c
	}
	if r.Copied != nil && len(r.Copied.SkippedPaths) > MaxReportedFiles {
		c := *r.Copied
		c.SkippedPaths = c.SkippedPaths[:MaxReportedFiles]
		r.Copied = &c
	}
	if len(r.Message) > 2048 {
		r.Message = r.Message[:2048]
	}
	b, _ := json.Marshal(r)
	for len(b) > terminationMaxSize && r.Change != nil && (len(r.Change.Files) > 0 || len(r.Change.Skipped) > 0 || len(r.Change.Binary) > 0) {
		c := *r.Change
		c.Files, c.Binary, c.Skipped = half(c.Files), half(c.Binary), half(c.Skipped)
		r.Change = &c
		b, _ = json.Marshal(r)
	}
	for len(b) > terminationMaxSize && r.Copied != nil && len(r.Copied.SkippedPaths) > 0 {
		c := *r.Copied
		c.SkippedPaths = half(c.SkippedPaths)
		r.Copied = &c
		b, _ = json.Marshal(r)
	}
	return b
}

func half(l []string) []string { return l[:len(l)/2] }

// ParseResult reads a git pod's termination message.
func ParseResult(msg string) (Result, error) {
	var r Result
	if err := json.Unmarshal([]byte(msg), &r); err != nil {
		return Result{}, fmt.Errorf("the git pod's termination message is not its result: %v", err)
	}
	return r, nil
}

// Record is a change as the controller records it for a task (its change
// ConfigMap's RecordKey), for `kubectl toolgate diff` and `export` to read.
type Record struct {
	// Request is the change request it answers (the task's annotation's value).
	Request string `json:"request"`
	// Base is the commit the workspace was cloned at; Tree the worktree's tree.
	Base string `json:"base,omitempty"`
	Tree string `json:"tree,omitempty"`
	// Files, Binary and Skipped as in Change (at most MaxReportedFiles each);
	// FileCount is how many files changed in all.
	Files     []string `json:"files,omitempty"`
	Binary    []string `json:"binary,omitempty"`
	Skipped   []string `json:"skipped,omitempty"`
	FileCount int      `json:"fileCount"`
	// DiffBytes and DiffSHA256 describe the whole diff; Complete says the record's
	// DiffKey holds all of it (false when it was too large for a ConfigMap: Pod
	// then names the pod whose log holds it).
	DiffBytes  int       `json:"diffBytes"`
	DiffSHA256 string    `json:"diffSHA256,omitempty"`
	Complete   bool      `json:"complete"`
	Pod        string    `json:"pod,omitempty"`
	RecordedAt time.Time `json:"recordedAt"`
	// Kind and Message say why the change could not be read.
	Kind    FailureKind `json:"kind,omitempty"`
	Message string      `json:"message,omitempty"`
}

// Keys of a task's change ConfigMap.
const (
	RecordKey = "change.json"
	DiffKey   = "change.diff"
)

// ChangeConfigMapName is the ConfigMap that holds a task's recorded change.
func ChangeConfigMapName(task string) string { return task + "-change" }
