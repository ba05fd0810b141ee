// Package gitws is what toolgate's own workspace pods do to a task's workspace:
// the git side of it (the clone that seeds it, the change an agent made to it, and
// the push of that change) and the copy of another task's workspace that seeds it
// instead (CopyTree). It uses go-git, so the pods that run it need no git binary,
// and it never runs hooks, filters or anything else a repository's files could name.
//
// A git task's claim holds two folders (Layout): the worktree, which every tool
// sees at /workspace, and the git directory beside it, which only toolgate's own
// clone, change and push pods mount. The agent can change every file it sees but
// not the record of the commit it started from, so the change it is judged by is
// computed against objects it could not rewrite.
package gitws

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Layout: the folders of a git task's claim.
const (
	// WorktreeDir is the claim's folder mounted at /workspace in every tool sandbox.
	WorktreeDir = "workspace"
	// GitDir is the claim's folder holding the repository's objects and refs; no
	// tool sandbox mounts it.
	GitDir = "git"
	// ToolgateDir is the worktree's folder of toolgate's own files (call
	// artifacts); it never enters a change.
	ToolgateDir = ".toolgate"
)

// Files of a credentials Secret, mounted as a folder. A token (or password) is sent
// with HTTP basic authentication; an SSH key needs known_hosts, so that the key is
// only ever offered to the hosts listed there.
const (
	CredUsername   = "username"
	CredPassword   = "password"
	CredToken      = "token"
	CredSSHKey     = "ssh-privatekey"
	CredKnownHosts = "known_hosts"
)

// FailureKind says why a git step failed, for the task's condition.
type FailureKind string

const (
	FailureURLInvalid         FailureKind = "URLInvalid"
	FailureRepositoryNotFound FailureKind = "RepositoryNotFound"
	FailureRevisionNotFound   FailureKind = "RevisionNotFound"
	FailureCredentials        FailureKind = "CredentialsRefused"
	FailureHostUnreachable    FailureKind = "HostUnreachable"
	FailureBranchExists       FailureKind = "BranchExists"
	FailureChanged            FailureKind = "WorkspaceChanged"
	FailureOther              FailureKind = "Failed"
	// FailureNoSpace: the workspace to copy is larger than the claim holds.
	FailureNoSpace FailureKind = "NoSpace"
)

// Error is a git step's failure with its kind.
type Error struct {
	Kind FailureKind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func fail(kind FailureKind, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// KindOf is the kind of err: its own when it is an *Error, else FailureOther.
func KindOf(err error) FailureKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return FailureOther
}

var scpLike = regexp.MustCompile(`^([A-Za-z0-9._~-]+@)?([A-Za-z0-9.-]+):([^/:].*)$`)

// Remote is a repository URL checked for what toolgate accepts: https, http, ssh
// and git URLs, and the scp-like user@host:path form of ssh. Host and Port are
// where the pod that reaches it connects.
type Remote struct {
	URL    string
	Scheme string
	Host   string
	Port   int
}

// ParseRemote checks a repository URL. It refuses what would reach anything but a
// remote host: file URLs and local paths (the clone pod's own disk), an
// ext:: transport, a URL with a password in it (credentials belong in the Secret),
// a query or fragment, and a host that is empty or starts with "-".
func ParseRemote(raw string) (Remote, error) {
	r, err := parseRemote(raw)
	if err != nil {
		return r, err
	}
	// The clone reaches what go-git makes of the URL; the fence opens what this
	// reading makes of it. Where the two differ (a scp-like path that go-git reads
	// as a local file, a port in the host part), the URL is refused.
	ep, err := transport.NewEndpoint(raw)
	port := 0
	if err == nil {
		port = ep.Port
		if port == 0 {
			port = defaultPorts[r.Scheme]
		}
	}
	if err != nil || ep.Protocol != r.Scheme || ep.Host != r.Host || port != r.Port {
		got := "an error"
		if err == nil {
			got = fmt.Sprintf("%s to %s port %d", ep.Protocol, ep.Host, ep.Port)
		}
		return Remote{}, fail(FailureURLInvalid, "the repository URL %q is read as %s by git and as %s to %s port %d by toolgate's network fence: write it as scheme://host[:port]/path", raw, got, r.Scheme, r.Host, r.Port)
	}
	return r, nil
}

var defaultPorts = map[string]int{"https": 443, "http": 80, "ssh": 22, "git": 9418}

func parseRemote(raw string) (Remote, error) {
	if strings.TrimSpace(raw) != raw || raw == "" {
		return Remote{}, fail(FailureURLInvalid, "the repository URL %q is empty or has surrounding space", raw)
	}
	if m := scpLike.FindStringSubmatch(raw); m != nil && !strings.Contains(raw, "://") {
		host := m[2]
		if err := checkHost(raw, host); err != nil {
			return Remote{}, err
		}
		return Remote{URL: raw, Scheme: "ssh", Host: host, Port: 22}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Remote{}, fail(FailureURLInvalid, "the repository URL %q does not parse: %v", raw, err)
	}
	def, ok := defaultPorts[u.Scheme]
	if !ok {
		return Remote{}, fail(FailureURLInvalid, "the repository URL %q has scheme %q: use https, http, ssh or git (or user@host:path for ssh)", raw, u.Scheme)
	}
	if _, has := u.User.Password(); has {
		return Remote{}, fail(FailureURLInvalid, "the repository URL %q carries a password: put credentials in the Secret spec.workspace.git.secretRef names", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return Remote{}, fail(FailureURLInvalid, "the repository URL %q has a query, a fragment or no host part: name the repository by scheme://host/path", raw)
	}
	if err := checkHost(raw, u.Hostname()); err != nil {
		return Remote{}, err
	}
	port := def
	if p := u.Port(); p != "" {
		if _, err := fmt.Sscanf(p, "%d", &port); err != nil || port < 1 || port > 65535 {
			return Remote{}, fail(FailureURLInvalid, "the repository URL %q has port %q, which is not a port", raw, p)
		}
	}
	return Remote{URL: raw, Scheme: u.Scheme, Host: u.Hostname(), Port: port}, nil
}

func checkHost(raw, host string) error {
	if host == "" || strings.HasPrefix(host, "-") {
		return fail(FailureURLInvalid, "the repository URL %q names no usable host", raw)
	}
	return nil
}

// Credentials are what a credentials Secret holds.
type Credentials struct {
	Username   string
	Secret     string // a token or password, for http(s)
	SSHKey     []byte
	KnownHosts string // the path of the known_hosts file
}

// LoadCredentials reads a mounted credentials Secret; an empty dir is none.
func LoadCredentials(dir string) (*Credentials, error) {
	if dir == "" {
		return nil, nil
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return ""
		}
		return strings.TrimRight(string(b), "\r\n")
	}
	c := &Credentials{Username: read(CredUsername), Secret: read(CredToken)}
	if c.Secret == "" {
		c.Secret = read(CredPassword)
	}
	if key := read(CredSSHKey); key != "" {
		c.SSHKey = []byte(key + "\n")
		c.KnownHosts = filepath.Join(dir, CredKnownHosts)
		if _, err := os.Stat(c.KnownHosts); err != nil {
			return nil, fail(FailureCredentials, "the credentials Secret has %s but no %s: without it the key would be offered to any host that answers; add the host's keys (ssh-keyscan HOST)", CredSSHKey, CredKnownHosts)
		}
	}
	return c, nil
}

// auth is the transport's authentication for the remote, or nil for none.
func (c *Credentials) auth(r Remote) (transport.AuthMethod, error) {
	if c == nil {
		if r.Scheme == "ssh" {
			return nil, sshNeedsKey(r)
		}
		return nil, nil
	}
	switch r.Scheme {
	case "http", "https":
		if c.Secret == "" {
			return nil, nil
		}
		user := c.Username
		if user == "" {
			user = "git" // hosts that take a token ignore the user name, but it must not be empty
		}
		return &githttp.BasicAuth{Username: user, Password: c.Secret}, nil
	case "ssh":
		if c.SSHKey == nil {
			return nil, sshNeedsKey(r)
		}
		user := c.Username
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, c.SSHKey, "")
		if err != nil {
			return nil, fail(FailureCredentials, "the credentials Secret's %s is not a usable private key: %v", CredSSHKey, err)
		}
		hostKeys, err := knownhosts.New(c.KnownHosts)
		if err != nil {
			return nil, fail(FailureCredentials, "the credentials Secret's %s does not parse: %v", CredKnownHosts, err)
		}
		keys.HostKeyCallback = hostKeys
		return keys, nil
	}
	return nil, nil
}

// classify names the kind of a transport error.
func classify(r Remote, err error) error {
	if err == nil {
		return nil
	}
	var own *Error
	if errors.As(err, &own) {
		return own
	}
	var keyErr *knownhosts.KeyError
	var netErr net.Error
	var dnsErr *net.DNSError
	var opErr *net.OpError
	msg := err.Error()
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired):
		return fail(FailureCredentials, "%s asked for credentials, and those given (if any) were not accepted: set spec.workspace.git.secretRef to a Secret with a token (or username and password) the host accepts", r.URL)
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return fail(FailureCredentials, "%s refused the credentials: the Secret's token or key has no access to this repository", r.URL)
	case errors.As(err, &keyErr):
		return fail(FailureCredentials, "the host key of %s is not in the credentials Secret's known_hosts (or differs from it): %v", r.Host, err)
	case strings.Contains(msg, "unable to authenticate"), errors.Is(err, ssh.ErrNoAuth):
		return fail(FailureCredentials, "%s refused the SSH key: %v", r.URL, err)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fail(FailureRepositoryNotFound, "%s: no repository there (check the URL's path)", r.URL)
	case errors.As(err, &dnsErr):
		return fail(FailureHostUnreachable, "the host %s of %s does not resolve: %v", r.Host, r.URL, err)
	case errors.As(err, &opErr), errors.As(err, &netErr):
		return fail(FailureHostUnreachable, "cannot reach %s port %d: %v", r.Host, r.Port, err)
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "no route to host"), strings.Contains(msg, "i/o timeout"):
		return fail(FailureHostUnreachable, "cannot reach %s port %d: %v", r.Host, r.Port, err)
	}
	return fail(FailureOther, "%s: %v", r.URL, err)
}

func sshNeedsKey(r Remote) error {
	return fail(FailureCredentials, "%s is an ssh URL: it needs spec.workspace.git.secretRef naming a Secret with %s and %s", r.URL, CredSSHKey, CredKnownHosts)
}
