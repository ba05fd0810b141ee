// Package pgtest starts a real PostgreSQL for tests, from Debian's postgresql
// package: initdb and postgres into a temporary directory, reached through a Unix
// socket in it, as envtest starts etcd. Nothing listens on a network port, so
// test binaries running at once never meet. A server is for one test binary; each
// test takes a database of its own (NewDatabase).
//
// PostgreSQL refuses to run as root. Run as root (as CI is), the server runs as the
// postgres user Debian's package creates (or nobody), in a directory that user
// owns.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinEnv names a directory holding initdb and postgres, to use instead of the ones
// found on PATH or under /usr/lib/postgresql.
const BinEnv = "TOOLGATE_POSTGRES_BIN"

// superuser is the role initdb makes; every connection is made as it (trust
// authentication, over the socket only).
const superuser = "toolgate"

// Server is a running PostgreSQL.
type Server struct {
	bin, dir string
	cred     *syscall.Credential
	cmd      *exec.Cmd
	// exited is closed when the server's process has ended.
	exited chan struct{}
}

// Start makes a new database cluster in a temporary directory and starts it.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir}
	if err := s.asUnprivileged(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.dataDir(), "-U", superuser, "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	if err := s.Restart(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// asUnprivileged makes the directory the server's when the test runs as root.
func (s *Server) asUnprivileged() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return fmt.Errorf("PostgreSQL does not run as root, and there is no postgres or nobody user to run it as: %w", err)
		}
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return os.Chown(s.dir, int(uid), int(gid))
}

// Restart starts the server on its data directory: after Stop, it comes back with
// every database as it was (a restart of the archive's database, in the tests of
// what survives one).
func (s *Server) Restart() error {
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.dataDir(), "-k", s.dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	log, err := os.Create(filepath.Join(os.TempDir(), filepath.Base(s.dir)+".log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting postgres: %w", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); _ = log.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return nil
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(log.Name())
			return fmt.Errorf("postgres exited before it took connections (%v): %s", waitErr, out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.Stop()
			return fmt.Errorf("postgres took no connection within a minute: %w", err)
		}
	}
}

// Stop shuts the server down (fast: open connections are ended) and waits for it.
func (s *Server) Stop() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
	return nil
}

// Close stops the server and removes its directory and log.
func (s *Server) Close() error {
	err := s.Stop()
	_ = os.Remove(filepath.Join(os.TempDir(), filepath.Base(s.dir)+".log"))
	return errors.Join(err, os.RemoveAll(s.dir))
}

// DSN is the connection string of a database of the server.
func (s *Server) DSN(database string) string {
	return fmt.Sprintf("host=%s user=%s dbname=%s sslmode=disable", s.dir, superuser, database)
}

var databases atomic.Int64

// NewDatabase creates an empty database for the test and returns its connection
// string; it is dropped when the test ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), databases.Add(1))
	if err := s.exec(t.Context(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := s.exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	return s.DSN(name)
}

func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// binDir finds initdb and postgres: BinEnv, then PATH, then the newest
// /usr/lib/postgresql/VERSION/bin (Debian's package does not put them on PATH).
func binDir() (string, error) {
	if dir := os.Getenv(BinEnv); dir != "" {
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	if len(found) > 0 {
		return filepath.Dir(found[0]), nil
	}
	return "", errors.New("no PostgreSQL found: install Debian's postgresql package (`make postgres-deps`), or set " + BinEnv + " to a directory holding initdb and postgres")
}

// version is the major version in /usr/lib/postgresql/VERSION/bin/initdb.
func version(initdb string) int {
	parts := strings.Split(initdb, string(filepath.Separator))
	v, _ := strconv.Atoi(parts[len(parts)-3])
	return v
}
