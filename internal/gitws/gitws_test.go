package gitws

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/gitws/gittest"
)

func layout(t *testing.T) (worktree, gitDir string) {
	root := t.TempDir()
	return filepath.Join(root, WorktreeDir), filepath.Join(root, GitDir)
}

func goodCreds(s *gittest.Server) *Credentials {
	return &Credentials{Username: s.User, Secret: s.Token}
}

func TestCloneRevisions(t *testing.T) {
	s := gittest.NewServer(t)
	repo := s.AddRepo("calc")
	ctx := context.Background()
	for _, tc := range []struct {
		revision, commit, ref string
		has, hasNot           string
	}{
		{"", repo.Second, "refs/heads/main", "README", "feature.txt"},
		{"HEAD", repo.Second, "refs/heads/main", "README", "feature.txt"},
		{"main", repo.Second, "refs/heads/main", "README", ""},
		{"feature", repo.Feature, "refs/heads/feature", "feature.txt", "README"},
		{"refs/heads/feature", repo.Feature, "refs/heads/feature", "feature.txt", ""},
		{"v1", repo.First, "refs/tags/v1", "calc.sh", "README"},
		{repo.First, repo.First, "", "calc.sh", "README"},
		{repo.First[:10], repo.First, "", "calc.sh", "README"},
	} {
		t.Run("revision="+tc.revision, func(t *testing.T) {
			wt, gd := layout(t)
			got, err := Clone(ctx, repo.URL, tc.revision, goodCreds(s), wt, gd)
			if err != nil {
				t.Fatalf("clone: %v", err)
			}
			if got.Commit != tc.commit || got.Ref != tc.ref {
				t.Fatalf("cloned %+v, want commit %s ref %q", got, tc.commit, tc.ref)
			}
			if _, err := os.Stat(filepath.Join(wt, tc.has)); err != nil {
				t.Fatalf("the worktree lacks %s: %v", tc.has, err)
			}
			if tc.hasNot != "" {
				if _, err := os.Stat(filepath.Join(wt, tc.hasNot)); err == nil {
					t.Fatalf("the worktree has %s, which revision %q does not", tc.hasNot, tc.revision)
				}
			}
			if _, err := os.Stat(filepath.Join(wt, ".git")); err == nil {
				t.Fatal("the worktree holds .git: the git directory must be beside it, out of the tools' reach")
			}
			// A second clone into the same layout is the first one's result.
			again, err := Clone(ctx, repo.URL, tc.revision, goodCreds(s), wt, gd)
			if err != nil || again.Commit != tc.commit {
				t.Fatalf("second clone: %+v %v", again, err)
			}
		})
	}
	t.Run("branches and tags are shallow", func(t *testing.T) {
		wt, gd := layout(t)
		if _, err := Clone(ctx, repo.URL, "main", goodCreds(s), wt, gd); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(gd, "shallow")); err != nil || !strings.Contains(string(b), repo.Second) {
			t.Fatalf("no shallow file naming %s: %q %v", repo.Second, b, err)
		}
	})
	t.Run("a failed attempt's leftovers are cleared", func(t *testing.T) {
		wt, gd := layout(t)
		if err := os.MkdirAll(wt, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wt, "left-over"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Clone(ctx, repo.URL, "", goodCreds(s), wt, gd); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(wt, "left-over")); err == nil {
			t.Fatal("a failed attempt's file stayed in the worktree")
		}
	})
	t.Run("a clone cut short after its fetch is made again, not taken as done", func(t *testing.T) {
		wt, gd := layout(t)
		if _, err := Clone(ctx, repo.URL, "main", goodCreds(s), wt, gd); err != nil {
			t.Fatal(err)
		}
		// As a pod killed during its checkout leaves it: the git directory holds a
		// HEAD, the worktree lacks files, nothing recorded the clone as finished.
		if err := os.Remove(filepath.Join(gd, ClonedMarker)); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(wt, "calc.sh")); err != nil {
			t.Fatal(err)
		}
		got, err := Clone(ctx, repo.URL, "main", goodCreds(s), wt, gd)
		if err != nil || got.Commit != repo.Second {
			t.Fatalf("clone again: %+v %v", got, err)
		}
		if b, err := os.ReadFile(filepath.Join(wt, "calc.sh")); err != nil || string(b) != gittest.Files["calc.sh"] {
			t.Fatalf("the worktree was not checked out again: %q %v", b, err)
		}
	})
}

func TestCloneFailures(t *testing.T) {
	s := gittest.NewServer(t)
	repo := s.AddRepo("calc")
	ctx := context.Background()
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/calc.git"
	_ = l.Close()
	for _, tc := range []struct {
		name, url, revision string
		creds               *Credentials
		kind                FailureKind
		says                string
	}{
		{"unknown revision", repo.URL, "no-such-branch", goodCreds(s), FailureRevisionNotFound, "branches: feature, main; tags: v1"},
		{"unknown commit", repo.URL, "deadbeef", goodCreds(s), FailureRevisionNotFound, "no commit of its history starts with it"},
		{"no credentials", repo.URL, "", nil, FailureCredentials, "asked for credentials"},
		{"wrong token", repo.URL, "", &Credentials{Username: s.User, Secret: "wrong"}, FailureCredentials, "asked for credentials"},
		{"no repository", s.URL + "/nothing.git", "", goodCreds(s), FailureRepositoryNotFound, "no repository there"},
		{"host down", closed, "", goodCreds(s), FailureHostUnreachable, "cannot reach 127.0.0.1"},
		{"host unknown", "https://no-such-host.invalid/r.git", "", nil, FailureHostUnreachable, "does not resolve"},
		{"file URL", "file:///etc", "", nil, FailureURLInvalid, `scheme "file"`},
		{"local path", "/srv/repo.git", "", nil, FailureURLInvalid, "scheme"},
		{"ext transport", "ext::sh -c touch% /tmp/pwned", "", nil, FailureURLInvalid, ""},
		{"password in URL", "https://u:p@example.com/r.git", "", nil, FailureURLInvalid, "carries a password"},
		{"option as host", "ssh://-oProxyCommand=x/r", "", nil, FailureURLInvalid, "no usable host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wt, gd := layout(t)
			_, err := Clone(ctx, tc.url, tc.revision, tc.creds, wt, gd)
			if err == nil {
				t.Fatal("clone succeeded")
			}
			if KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %s: %v; want %s saying %q", KindOf(err), err, tc.kind, tc.says)
			}
		})
	}
	t.Run("an ssh key without known_hosts is refused", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, CredSSHKey), []byte("key"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadCredentials(dir); KindOf(err) != FailureCredentials || !strings.Contains(err.Error(), "known_hosts") {
			t.Fatalf("got %v", err)
		}
	})
}

// edit makes an agent's change: an edit, a new file, a deletion, a mode change,
// and files that must not enter the change.
func edit(t *testing.T, wt string) {
	t.Helper()
	write := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(wt, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("calc.sh", "echo $(($1 + $2))\n", 0o644)
	write("docs/notes.md", "sum, not difference\n", 0o644)
	write(".toolgate/executions/x.log", "call output\n", 0o644)
	write("vendor/.git/config", "[core]\n", 0o644)
	if err := os.Remove(filepath.Join(wt, "README")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(wt, "test.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(wt, "empty-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestChangeAndMailApplyWithGitAm(t *testing.T) {
	s, repo, wt, gd, cloned := cloneMain(t)
	none, err := ComputeChange(gd, wt, cloned.Commit)
	if err != nil || none.Diff != "" || len(none.Files) != 0 {
		t.Fatalf("an untouched workspace has a change: %+v %v", none, err)
	}
	edit(t, wt)
	// The git directory is read-only to the change: nothing is written into it.
	before := treeListing(t, gd)
	c, err := ComputeChange(gd, wt, cloned.Commit)
	if err != nil {
		t.Fatal(err)
	}
	if after := treeListing(t, gd); after != before {
		t.Fatal("computing the change wrote into the git directory")
	}
	if got := strings.Join(c.Files, ","); got != "README,calc.sh,docs/notes.md,test.sh" {
		t.Fatalf("files %s", got)
	}
	if strings.Join(c.Skipped, ",") != "vendor/.git (a .git folder)" {
		t.Fatalf("skipped %v", c.Skipped)
	}
	if strings.Contains(c.Diff, ".toolgate") || strings.Contains(c.Diff, "vendor") {
		t.Fatalf("the diff carries toolgate's folder or a .git folder:\n%s", c.Diff)
	}
	for _, want := range []string{"-echo $(($1 - $2))", "+echo $(($1 + $2))", "new file mode 100644", "deleted file mode 100644", "new mode 100755"} {
		if !strings.Contains(c.Diff, want) {
			t.Fatalf("the diff lacks %q:\n%s", want, c.Diff)
		}
	}
	mail := Mail(c, strings.Repeat("0", 40), "AgentTask default/fix-tests", "toolgate@toolgate.dev", "Fix the sum.\n\nThe test expects 2 + 3 = 5.", time.Unix(1700000000, 0))
	// A fresh clone by git itself takes the patch with git am, and ends at exactly
	// the tree the change names.
	fresh := t.TempDir()
	gittest.Git(t, fresh, "-c", "http.extraHeader=Authorization: Basic "+basic(s), "clone", "-q", repo.URL, ".")
	patchFile := filepath.Join(t.TempDir(), "change.patch")
	if err := os.WriteFile(patchFile, []byte(mail), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, fresh, "am", "-q", patchFile)
	if tree := gittest.Git(t, fresh, "rev-parse", "HEAD^{tree}"); tree != c.Tree {
		t.Fatalf("git am gave tree %s, the change names %s", tree, c.Tree)
	}
	if msg := gittest.Git(t, fresh, "log", "-1", "--format=%s|%an|%b"); msg != "Fix the sum.|AgentTask default/fix-tests|The test expects 2 + 3 = 5." {
		t.Fatalf("commit message %q", msg)
	}
}

func TestPush(t *testing.T) {
	s := gittest.NewServer(t)
	repo := s.AddRepo("calc")
	ctx := context.Background()
	wt, gd := layout(t)
	cloned, err := Clone(ctx, repo.URL, "main", goodCreds(s), wt, gd)
	if err != nil {
		t.Fatal(err)
	}
	edit(t, wt)
	c, err := ComputeChange(gd, wt, cloned.Commit)
	if err != nil {
		t.Fatal(err)
	}
	req := PushRequest{URL: repo.URL, Branch: "toolgate/fix", Base: cloned.Commit, Tree: c.Tree,
		Author: "AgentTask default/fix-tests", Email: "toolgate@toolgate.dev", Message: "Fix the sum.", Date: time.Now()}

	t.Run("refused without credentials, nothing on the server", func(t *testing.T) {
		if _, err := Push(ctx, req, nil, gd, wt); KindOf(err) != FailureCredentials {
			t.Fatalf("got %v", err)
		}
		assertNoBranch(t, repo, "toolgate/fix")
	})
	t.Run("refused when the workspace is not the approved tree", func(t *testing.T) {
		stale := req
		stale.Tree = strings.Repeat("1", 40)
		if _, err := Push(ctx, stale, goodCreds(s), gd, wt); KindOf(err) != FailureChanged {
			t.Fatalf("got %v", err)
		}
		assertNoBranch(t, repo, "toolgate/fix")
	})
	pushed, err := Push(ctx, req, goodCreds(s), gd, wt)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if got := gittest.Git(t, repo.Dir, "rev-parse", "refs/heads/toolgate/fix"); got != pushed.Commit {
		t.Fatalf("the server's branch is at %s, pushed %s", got, pushed.Commit)
	}
	if tree := gittest.Git(t, repo.Dir, "rev-parse", pushed.Commit+"^{tree}"); tree != c.Tree {
		t.Fatalf("the pushed tree is %s, the change's %s", tree, c.Tree)
	}
	if parent := gittest.Git(t, repo.Dir, "rev-parse", pushed.Commit+"^"); parent != cloned.Commit {
		t.Fatalf("the pushed commit's parent is %s, not the cloned %s", parent, cloned.Commit)
	}
	if main := gittest.Git(t, repo.Dir, "rev-parse", "refs/heads/main"); main != repo.Second {
		t.Fatal("main moved")
	}
	t.Run("an existing branch is never moved", func(t *testing.T) {
		if _, err := Push(ctx, req, goodCreds(s), gd, wt); KindOf(err) != FailureBranchExists {
			t.Fatalf("got %v", err)
		}
		again := req
		again.Branch = "main"
		if _, err := Push(ctx, again, goodCreds(s), gd, wt); KindOf(err) != FailureBranchExists {
			t.Fatalf("got %v", err)
		}
		if main := gittest.Git(t, repo.Dir, "rev-parse", "refs/heads/main"); main != repo.Second {
			t.Fatal("main moved")
		}
	})
}

// A workspace with no change pushes nothing: no empty commit, no branch.
func TestPushRefusesAnEmptyChange(t *testing.T) {
	s, repo, wt, gd, cloned := cloneMain(t)
	c, err := ComputeChange(gd, wt, cloned.Commit)
	if err != nil || len(c.Files) != 0 {
		t.Fatalf("an untouched workspace has a change: %+v %v", c, err)
	}
	req := PushRequest{URL: repo.URL, Branch: "toolgate/empty", Base: cloned.Commit, Tree: c.Tree,
		Author: "AgentTask default/fix-tests", Email: "toolgate@toolgate.dev", Message: "Nothing.", Date: time.Now()}
	_, err = Push(context.Background(), req, goodCreds(s), gd, wt)
	if err == nil || !strings.Contains(err.Error(), "the workspace has no change against "+cloned.Commit+": nothing to push") {
		t.Fatalf("push of no change: %v", err)
	}
	assertNoBranch(t, repo, "toolgate/empty")
}

// The push only creates a branch, and never forces: a branch of the same name that
// another pusher creates after the push looked at the remote's branches, before it
// sends, is not rewritten (the push's commit does not descend from it).
func TestPushNeverForcesABranchThatAppeared(t *testing.T) {
	s, repo, wt, gd, cloned := cloneMain(t)
	edit(t, wt)
	c, err := ComputeChange(gd, wt, cloned.Commit)
	if err != nil {
		t.Fatal(err)
	}
	const branch = "toolgate/raced"
	raced := make(chan error, 1)
	var once sync.Once
	s.Before(func(r *http.Request) {
		// The push's second look, for its send: the branch is there now.
		if r.URL.Query().Get("service") == "git-receive-pack" {
			once.Do(func() {
				out, err := exec.Command("git", "--git-dir", repo.Dir, "update-ref", "refs/heads/"+branch, repo.Feature).CombinedOutput()
				if err != nil {
					err = fmt.Errorf("%v: %s", err, out)
				}
				raced <- err
			})
		}
	})
	req := PushRequest{URL: repo.URL, Branch: branch, Base: cloned.Commit, Tree: c.Tree,
		Author: "AgentTask default/fix-tests", Email: "toolgate@toolgate.dev", Message: "Fix the sum.", Date: time.Now()}
	pushed, err := Push(context.Background(), req, goodCreds(s), gd, wt)
	select {
	case raceErr := <-raced:
		if raceErr != nil {
			t.Fatalf("creating the other pusher's branch: %v", raceErr)
		}
	default:
		t.Fatal("the push never asked to send: the other pusher's branch was not made")
	}
	if got := gittest.Git(t, repo.Dir, "rev-parse", "refs/heads/"+branch); got != repo.Feature {
		t.Fatalf("the other pusher's branch was rewritten: it is at %s, not %s (push: %+v, %v)", got, repo.Feature, pushed, err)
	}
	if KindOf(err) != FailureBranchExists || !strings.Contains(err.Error(), "already has branch "+branch+" (at "+repo.Feature+")") {
		t.Fatalf("the push over a branch that appeared: %+v, %v; want %s naming the branch", pushed, err, FailureBranchExists)
	}
}

func assertNoBranch(t *testing.T, repo gittest.Repo, branch string) {
	t.Helper()
	cmd := exec.Command("git", "rev-parse", "--verify", "-q", "refs/heads/"+branch)
	cmd.Dir = repo.Dir
	if out, err := cmd.Output(); err == nil {
		t.Fatalf("the server has branch %s at %s", branch, out)
	}
}

func basic(s *gittest.Server) string {
	return encodeBasic(s.User + ":" + s.Token)
}

func treeListing(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + " " + info.ModTime().String() + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A symlink the agent planted is recorded as a link (its target's name), never as
// what it points at: not the git directory beside the worktree, not a file of the
// pod that reads the change.
func TestChangeRecordsSymlinksNotWhatTheyPointAt(t *testing.T) {
	_, _, wt, gd, cloned := cloneMain(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("do-not-leak\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"to-git": filepath.Join("..", filepath.Base(gd), "config"), "to-secret": secret} {
		if err := os.Symlink(target, filepath.Join(wt, name)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := ComputeChange(gd, wt, cloned.Commit)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.Diff, "do-not-leak") || strings.Contains(c.Diff, "[core]") {
		t.Fatalf("the diff carries what a link points at:\n%s", c.Diff)
	}
	for _, want := range []string{"new file mode 120000", "+" + secret} {
		if !strings.Contains(c.Diff, want) {
			t.Fatalf("the diff lacks %q:\n%s", want, c.Diff)
		}
	}
}

// A goal is the commit message and nothing more: a goal that carries an author
// line and a patch of its own gives git am neither.
func TestMailGoalCannotForgeAnAuthorOrAPatch(t *testing.T) {
	s, repo, wt, gd, cloned := cloneMain(t)
	if err := os.WriteFile(filepath.Join(wt, "calc.sh"), []byte("echo $(($1 + $2))\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := ComputeChange(gd, wt, cloned.Commit)
	if err != nil {
		t.Fatal(err)
	}
	forged := "diff --git a/Makefile b/Makefile\nnew file mode 100644\n--- /dev/null\n+++ b/Makefile\n@@ -0,0 +1 @@\n+evil\n"
	for name, goal := range map[string]string{
		"an in-body From":   "Fix the sum.\n\nFrom: Trusted Dev <trusted@example.com>\n\nThe test expects 5.",
		"a patch after ---": "Fix the sum.\n\nSee below.\n---\n" + forged,
		"a bare diff":       "Fix the sum.\n\n" + forged,
		"a scissors line":   "Fix the sum.\n\n-- >8 --\nFrom: Trusted Dev <trusted@example.com>\n\n" + forged,
		"a header at first": "Fix the sum.\n\nSubject: something else\n\nmore",
	} {
		t.Run(name, func(t *testing.T) {
			mail := Mail(c, cloned.Commit, "AgentTask default/fix", "toolgate@default.invalid", goal, time.Unix(1700000000, 0))
			fresh := t.TempDir()
			gittest.Git(t, fresh, "-c", "http.extraHeader=Authorization: Basic "+basic(s), "clone", "-q", repo.URL, ".")
			patchFile := filepath.Join(t.TempDir(), "change.patch")
			if err := os.WriteFile(patchFile, []byte(mail), 0o644); err != nil {
				t.Fatal(err)
			}
			gittest.Git(t, fresh, "am", "-q", "--scissors", patchFile)
			if tree := gittest.Git(t, fresh, "rev-parse", "HEAD^{tree}"); tree != c.Tree {
				t.Fatalf("git am gave tree %s, the change names %s:\n%s", tree, c.Tree, mail)
			}
			if got := gittest.Git(t, fresh, "log", "-1", "--format=%an|%s"); got != "AgentTask default/fix|Fix the sum." {
				t.Fatalf("author and subject %q:\n%s", got, mail)
			}
		})
	}
}

// Whatever the agent names or makes in the worktree costs it that entry, never the
// whole change: names git refuses, a FIFO that would block a reader, a file too big
// to hold (an unreadable one: TestChangeLeavesOutWhatItCannotRead).
func TestChangeSkipsWhatNoCommitHolds(t *testing.T) {
	_, _, wt, gd, cloned := cloneMain(t)
	if err := os.WriteFile(filepath.Join(wt, "calc.sh"), []byte("echo $(($1 + $2))\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".GIT", "git~1", ".git. ", "a\x1bb", `back\slash`} {
		if err := os.MkdirAll(filepath.Join(wt, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wt, name, "config"), []byte("[core]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(wt, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	big, err := os.Create(filepath.Join(wt, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(MaxChangeFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	_ = big.Close()
	c, err := ComputeChange(gd, wt, cloned.Commit)
	if err != nil {
		t.Fatalf("the change could not be read: %v", err)
	}
	files := strings.Join(c.Files, ",")
	if files != "calc.sh" {
		t.Fatalf("files %v, skipped %v", c.Files, c.Skipped)
	}
	skipped := strings.Join(c.Skipped, "|")
	for _, want := range []string{".GIT (a .git folder)", "git~1 (a .git folder)", ".git.  (a .git folder)", "a\x1bb (a control", `back\slash (a control`, "fifo (not a file", "big.bin (67108865 bytes"} {
		if !strings.Contains(skipped, want) {
			t.Errorf("skipped %q lacks %q", skipped, want)
		}
	}
}

// A file or folder the change pod cannot read is left out of the change and named,
// never taken for an empty file: what was shown and pushed would not be what the
// agent wrote. The pod's user is not root (root reads every
// file), so the change is read by a workspace pod of its own as an unprivileged
// user.
func TestChangeLeavesOutWhatItCannotRead(t *testing.T) {
	_, _, wt, _, cloned := cloneMain(t)
	if err := os.WriteFile(filepath.Join(wt, "calc.sh"), []byte("echo $(($1 + $2))\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, "secret"), []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(wt, "locked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, "locked", "inside"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(wt, "locked"), 0o000); err != nil {
		t.Fatal(err)
	}
	claim := filepath.Dir(wt)
	openToAll(t, claim)
	res := runPodUnprivileged(t, claim, Request{Op: OpChange, Base: cloned.Commit})
	if res.Kind != "" || res.Change == nil {
		t.Fatalf("the change could not be read: %+v", res)
	}
	if files := strings.Join(res.Change.Files, ","); files != "calc.sh" {
		t.Errorf("files %q, want calc.sh alone: what could not be read is no change", files)
	}
	skipped := strings.Join(res.Change.Skipped, "|")
	for _, want := range []string{"secret (unreadable)", "locked (unreadable)"} {
		if !strings.Contains(skipped, want) {
			t.Errorf("skipped %q lacks %q", skipped, want)
		}
	}
}

// A file the agent swaps after it was seen is not followed: not through a link out
// of the worktree, not into a FIFO that would block the reader.
func TestReadRegularDoesNotFollowASwap(t *testing.T) {
	wt := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("do-not-leak"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, "seen"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	seen, err := os.Lstat(filepath.Join(wt, "seen"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(wt)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = root.Close() }()
	if b, why := readRegular(root, "seen", seen); why != "" || string(b) != "ok" {
		t.Fatalf("the file as seen: %q %q", b, why)
	}
	// The swaps: a link out of the worktree, a FIFO. (A file replaced by another
	// file of the worktree is read as the worktree now holds it.)
	swap := func(make func(string) error) {
		t.Helper()
		if err := os.Remove(filepath.Join(wt, "seen")); err != nil {
			t.Fatal(err)
		}
		if err := make(filepath.Join(wt, "seen")); err != nil {
			t.Fatal(err)
		}
	}
	for name, make := range map[string]func(string) error{
		"a link out": func(p string) error { return os.Symlink(outside, p) },
		"a FIFO":     func(p string) error { return syscall.Mkfifo(p, 0o644) },
	} {
		swap(make)
		if b, why := readRegular(root, "seen", seen); why == "" || len(b) != 0 {
			t.Errorf("%s: read %q (%q)", name, b, why)
		}
	}
}

// cloneMain clones the sample's main branch from a fresh server into a fresh
// layout.
func cloneMain(t *testing.T) (*gittest.Server, gittest.Repo, string, string, Cloned) {
	t.Helper()
	s := gittest.NewServer(t)
	repo := s.AddRepo("calc")
	wt, gd := layout(t)
	cloned, err := Clone(context.Background(), repo.URL, "main", goodCreds(s), wt, gd)
	if err != nil {
		t.Fatal(err)
	}
	return s, repo, wt, gd, cloned
}
