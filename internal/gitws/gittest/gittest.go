// Package gittest serves real git repositories over smart HTTP for tests: git's own
// git-http-backend, run as CGI behind HTTP basic authentication, on repositories
// built with the git command line.
package gittest

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Backend is where Debian's git package installs git-http-backend.
const Backend = "/usr/lib/git-core/git-http-backend"

// Server serves the bare repositories under Root at URL/NAME.git.
type Server struct {
	URL  string
	Root string
	// User and Token are the only credentials it accepts.
	User, Token string
	t           testing.TB
}

// NewServer starts a server for the test; it is closed when the test ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	if _, err := os.Stat(Backend); err != nil {
		t.Fatalf("%s is missing: install Debian's git package", Backend)
	}
	s := &Server{Root: t.TempDir(), User: "agent", Token: "s3cret-token", t: t}
	backend := &cgi.Handler{
		Path: Backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=agent"},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != s.User || pass != s.Token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
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
	// First and Second are the main branch's commits; Tag (annotated, "v1")
	// names First; Feature is the commit of branch "feature".
	First, Second, Feature string
}

// Files of the sample repository: a script and its failing test.
var Files = map[string]string{
	"calc.sh": "echo $(($1 - $2))\n",
	"test.sh": "got=$(sh calc.sh 2 3)\nif [ \"$got\" = 5 ]; then echo \"PASS: 2 + 3 = 5\"; else echo \"FAIL: 2 + 3 gave $got\"; exit 1; fi\n",
}

// AddRepo builds a repository: main with two commits (the first tagged v1, the
// second adding README), and a branch "feature" off the first.
func (s *Server) AddRepo(name string) Repo {
	t := s.t
	t.Helper()
	work := t.TempDir()
	Git(t, work, "init", "-q", "-b", "main")
	for file, content := range Files {
		if err := os.WriteFile(filepath.Join(work, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, work, "add", ".")
	Git(t, work, "commit", "-q", "-m", "calc and its test")
	first := Git(t, work, "rev-parse", "HEAD")
	Git(t, work, "tag", "-a", "v1", "-m", "v1")
	Git(t, work, "checkout", "-q", "-b", "feature")
	if err := os.WriteFile(filepath.Join(work, "feature.txt"), []byte("a feature\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, work, "add", ".")
	Git(t, work, "commit", "-q", "-m", "a feature")
	feature := Git(t, work, "rev-parse", "HEAD")
	Git(t, work, "checkout", "-q", "main")
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("calc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, work, "add", ".")
	Git(t, work, "commit", "-q", "-m", "README")
	second := Git(t, work, "rev-parse", "HEAD")
	dir := filepath.Join(s.Root, name+".git")
	Git(t, s.Root, "clone", "-q", "--bare", work, dir)
	Git(t, dir, "config", "http.receivepack", "true")
	return Repo{Name: name, URL: s.URL + "/" + name + ".git", Dir: dir, First: first, Second: second, Feature: feature}
}
