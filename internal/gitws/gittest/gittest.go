// Package gittest serves real git repositories over smart HTTP: git's own
// git-http-backend, run as CGI behind HTTP basic authentication. The tests start a
// Server; the e2e suite's git server (hack/gitserver) serves the same Handler in a
// pod. The sample repository is built with go-git at fixed times, so its commits
// are the same wherever it is built: a test knows them without asking the server.
package gittest

import (
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Backend is where Debian's git package installs git-http-backend.
const Backend = "/usr/lib/git-core/git-http-backend"

// Handler serves the bare repositories under root at /NAME.git with backend (a
// git-http-backend), to user with password token alone. Pushes are accepted into
// a repository whose config says http.receivepack (the sample's does).
func Handler(root, user, token, backend string) http.Handler {
	cgiHandler := &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=" + user, "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		cgiHandler.ServeHTTP(w, r)
	})
}

// Server serves the bare repositories under Root at URL/NAME.git.
type Server struct {
	URL  string
	Root string
	// User and Token are the only credentials it accepts.
	User, Token string
	t           testing.TB
	before      atomic.Pointer[func(*http.Request)]
}

// Before makes the server run f before it answers each request: a test's way to
// change a repository between two requests of one client operation (another
// pusher's branch appearing after a push listed the branches, before it sends).
// f runs on the server's goroutine: it must not call t.Fatal.
func (s *Server) Before(f func(*http.Request)) { s.before.Store(&f) }

// NewServer starts a server for the test; it is closed when the test ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	if _, err := os.Stat(Backend); err != nil {
		t.Fatalf("%s is missing: install Debian's git package", Backend)
	}
	s := &Server{Root: t.TempDir(), User: "agent", Token: "s3cret-token", t: t}
	h := Handler(s.Root, s.User, s.Token, Backend)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := s.before.Load(); f != nil {
			(*f)(r)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Git runs git in dir and returns its output; it fails the test on an error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Repo is a repository on the server, with the commits and refs it was built with.
type Repo struct {
	Name, URL string
	// Dir is the bare repository's folder on the server.
	Dir string
	Commits
}

// Commits are the sample repository's: First and Second are the main branch's;
// the annotated tag "v1" names First; Feature is the commit of branch "feature".
type Commits struct {
	First, Second, Feature string
}

// Files of the sample repository: a script and its failing test.
var Files = map[string]string{
	"calc.sh": "echo $(($1 - $2))\n",
	"test.sh": "got=$(sh calc.sh 2 3)\nif [ \"$got\" = 5 ]; then echo \"PASS: 2 + 3 = 5\"; else echo \"FAIL: 2 + 3 gave $got\"; exit 1; fi\n",
}

// AddRepo builds the sample repository on the server as NAME.git.
func (s *Server) AddRepo(name string) Repo {
	s.t.Helper()
	dir := filepath.Join(s.Root, name+".git")
	commits, err := BuildSample(dir)
	if err != nil {
		s.t.Fatal(err)
	}
	return Repo{Name: name, URL: s.URL + "/" + name + ".git", Dir: dir, Commits: commits}
}

// BuildSample writes the sample repository as a bare repository at dir: main with
// two commits (calc.sh and test.sh, then README), the first tagged v1 (annotated),
// and a branch "feature" off the first adding feature.txt. Its config accepts
// pushes over HTTP.
func BuildSample(dir string) (Commits, error) {
	fs := osfs.New(dir)
	store := filesystem.NewStorage(fs, cache.NewObjectLRUDefault())
	work := memfs.New()
	repo, err := git.InitWithOptions(store, work, git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")})
	if err != nil {
		return Commits{}, err
	}
	cfg, err := repo.Config()
	if err != nil {
		return Commits{}, err
	}
	cfg.Core.IsBare = true
	cfg.Raw.Section("http").SetOption("receivepack", "true")
	if err := repo.SetConfig(cfg); err != nil {
		return Commits{}, err
	}
	wt, err := repo.Worktree()
	if err != nil {
		return Commits{}, err
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	commit := func(message string, files map[string]string) (plumbing.Hash, error) {
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			f, err := work.Create(n)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			if _, err := f.Write([]byte(files[n])); err != nil {
				return plumbing.ZeroHash, err
			}
			if err := f.Close(); err != nil {
				return plumbing.ZeroHash, err
			}
			if _, err := wt.Add(n); err != nil {
				return plumbing.ZeroHash, err
			}
		}
		at = at.Add(time.Minute)
		sig := &object.Signature{Name: "sample", Email: "sample@example.com", When: at}
		return wt.Commit(message, &git.CommitOptions{Author: sig, Committer: sig})
	}
	first, err := commit("calc and its test", Files)
	if err != nil {
		return Commits{}, err
	}
	sig := &object.Signature{Name: "sample", Email: "sample@example.com", When: at}
	if _, err := repo.CreateTag("v1", first, &git.CreateTagOptions{Tagger: sig, Message: "v1\n"}); err != nil {
		return Commits{}, err
	}
	if err := wt.Checkout(&git.CheckoutOptions{Branch: plumbing.NewBranchReferenceName("feature"), Create: true}); err != nil {
		return Commits{}, err
	}
	feature, err := commit("a feature", map[string]string{"feature.txt": "a feature\n"})
	if err != nil {
		return Commits{}, err
	}
	if err := wt.Checkout(&git.CheckoutOptions{Branch: plumbing.NewBranchReferenceName("main")}); err != nil {
		return Commits{}, err
	}
	second, err := commit("README", map[string]string{"README": "calc\n"})
	if err != nil {
		return Commits{}, err
	}
	// A bare repository's HEAD names main; the worktree was only a builder.
	if err := store.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName("main"))); err != nil {
		return Commits{}, err
	}
	if _, err := os.Stat(filepath.Join(dir, "index")); err == nil {
		if err := os.Remove(filepath.Join(dir, "index")); err != nil {
			return Commits{}, fmt.Errorf("removing the builder's index: %w", err)
		}
	}
	return Commits{First: first.String(), Second: second.String(), Feature: feature.String()}, nil
}
