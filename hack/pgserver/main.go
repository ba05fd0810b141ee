// Command pgserver is the entrypoint of toolgate's in-cluster PostgreSQL image
// (`make images`: bin/images/postgres.tar, from Debian's postgresql package; the
// StatefulSet in config/archive runs it). It is a Go program rather than a shell
// script because it stays the container's first process: it turns the kubelet's
// SIGTERM into PostgreSQL's fast shutdown (SIGINT). PostgreSQL takes SIGTERM as a
// smart shutdown, which waits for every client to leave, and the controller's
// connection pool never leaves, so the pod would be killed at the end of its grace
// period instead of checkpointing.
//
// On each start it:
//  1. initialises the data directory when it holds no cluster yet: initdb into a
//     scratch directory beside it, renamed into place only once complete, so a pod
//     killed during initdb never leaves a half-made cluster that later starts would
//     take for a real one;
//  2. puts the data directory's mode back to 0700, which the kubelet's fsGroup
//     change may have widened;
//  3. sets the role's password to the one in --password-file (the Secret), so that
//     changing the Secret and restarting the pod changes the password;
//  4. runs postgres in the foreground, listening on --listen (the pod's IP) and on
//     127.0.0.1 (for kubectl port-forward; an address, as the image has no
//     /etc/hosts of its own), with its socket in --socket-dir.
//
// Connections over TCP authenticate with scram-sha-256. The Unix socket, which only
// a process in the container reaches (kubectl exec), admits the container's own user
// as the role by peer authentication, so psql in the pod needs no password.
//
//	pgserver [--data DIR] [--password-file FILE] [--listen ADDR] [--role NAME] [--database NAME]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	var c config
	flag.StringVar(&c.Bin, "bin", "/usr/lib/postgresql/15/bin", "Directory holding initdb and postgres.")
	flag.StringVar(&c.Data, "data", envOr("PGDATA", "/var/lib/postgresql/data/pgdata"), "The data directory. It must be a directory of its own below the volume's root, which initdb cannot take: the kubelet owns that root and makes it group-writable, and postgres refuses a data directory others can read.")
	flag.StringVar(&c.PasswordFile, "password-file", "/etc/toolgate/archive-db/password", "File holding the role's password (a mounted Secret's key).")
	flag.StringVar(&c.Listen, "listen", os.Getenv("POD_IP"), "Address postgres listens on, beside 127.0.0.1: the pod's IP (default $POD_IP).")
	flag.StringVar(&c.SocketDir, "socket-dir", "/tmp", "Directory of postgres's Unix socket (the root file system is read-only).")
	flag.StringVar(&c.Role, "role", "toolgate", "The superuser role initdb makes, which the DSN names.")
	flag.StringVar(&c.Database, "database", "toolgate", "The database made for the archive, which the DSN names.")
	flag.Parse()
	code, err := run(c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgserver: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

type config struct {
	Bin, Data, PasswordFile, Listen, SocketDir, Role, Database string
}

func run(c config) (int, error) {
	if c.Listen == "" {
		return 0, errors.New("--listen is empty: set POD_IP from the pod's status.podIP, or name an address")
	}
	password, err := readPassword(c.PasswordFile)
	if err != nil {
		return 0, err
	}
	osUser, err := user.Current()
	if err != nil {
		return 0, fmt.Errorf("the container's user has no /etc/passwd entry, which initdb and peer authentication need: %w", err)
	}
	if _, err := os.Stat(filepath.Join(c.Data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initialise(c, osUser.Username); err != nil {
			return 0, err
		}
	} else if err != nil {
		return 0, err
	}
	// The kubelet applies the pod's fsGroup to a volume as it mounts it, on some
	// volumes recursively (group rwx on every directory), and postgres refuses to
	// start on a data directory its group may write. The directory is ours: put its
	// mode back.
	if err := os.Chmod(c.Data, 0o700); err != nil {
		return 0, err
	}
	if err := single(c, "postgres", setPasswordSQL(c.Role, password)); err != nil {
		return 0, fmt.Errorf("setting the password of role %s: %w", c.Role, err)
	}
	return serve(c)
}

// readPassword reads the Secret's password; an empty one is refused, since initdb
// would otherwise make a role nobody can log in as over TCP.
func readPassword(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--password-file: %w", err)
	}
	p := strings.TrimRight(string(data), "\r\n")
	if p == "" {
		return "", fmt.Errorf("--password-file %s is empty", file)
	}
	if strings.ContainsAny(p, "\r\n") {
		return "", fmt.Errorf("--password-file %s holds more than one line", file)
	}
	return p, nil
}

// initialise makes the cluster in a scratch directory and renames it to c.Data.
func initialise(c config, osUser string) error {
	scratch := c.Data + ".init"
	if err := os.RemoveAll(scratch); err != nil {
		return err
	}
	// initdb wants the password in a file; the Secret's file is one, but it may end
	// in a newline, which initdb would keep as part of the password.
	pw, err := readPassword(c.PasswordFile)
	if err != nil {
		return err
	}
	pwfile := filepath.Join(c.SocketDir, ".pgserver-pw")
	if err := os.WriteFile(pwfile, []byte(pw+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	fmt.Fprintf(os.Stderr, "pgserver: no cluster in %s: initdb\n", c.Data)
	initdb := exec.Command(filepath.Join(c.Bin, "initdb"), "-D", scratch, "-U", c.Role, "--pwfile", pwfile,
		"--auth-host=scram-sha-256", "--auth-local=peer", "-E", "UTF8", "--no-locale")
	initdb.Stdout, initdb.Stderr = os.Stderr, os.Stderr
	if err := initdb.Run(); err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	if err := os.WriteFile(filepath.Join(scratch, "pg_hba.conf"), []byte(hbaConf(c.Role)), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(scratch, "pg_ident.conf"), []byte(identConf(osUser, c.Role)), 0o600); err != nil {
		return err
	}
	if err := single(c.withData(scratch), "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", quoteIdent(c.Database), quoteIdent(c.Role))); err != nil {
		return fmt.Errorf("creating database %s: %w", c.Database, err)
	}
	return os.Rename(scratch, c.Data)
}

func (c config) withData(dir string) config { c.Data = dir; return c }

// hbaConf admits the role from the network with its password only (the
// NetworkPolicy says who may reach the port at all), and through the socket as the
// container's own user.
func hbaConf(role string) string {
	return "# Written by pgserver at initdb (hack/pgserver); later starts leave it alone.\n" +
		"# TYPE  DATABASE  USER  ADDRESS    METHOD\n" +
		"local   all       " + role + "  peer map=container\n" +
		"host    all       all   0.0.0.0/0  scram-sha-256\n" +
		"host    all       all   ::/0       scram-sha-256\n"
}

// identConf maps the container's OS user to the role, for peer authentication.
func identConf(osUser, role string) string {
	return "# MAPNAME  SYSTEM-USERNAME  PG-USERNAME\ncontainer  " + osUser + "  " + role + "\n"
}

// setPasswordSQL is ALTER ROLE with the password as a string literal. With
// standard_conforming_strings (the default), doubling single quotes is the whole
// escaping a literal needs.
func setPasswordSQL(role, password string) string {
	return fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", quoteIdent(role), strings.ReplaceAll(password, "'", "''"))
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// single runs one statement in postgres's single-user mode: no server, no socket,
// no network, so nothing can connect while it runs. A statement that fails makes
// postgres print an ERROR but still exit 0, hence the check of its output.
func single(c config, database, statement string) error {
	cmd := exec.Command(filepath.Join(c.Bin, "postgres"), "--single", "-D", c.Data, "-c", "jit=off", database)
	cmd.Stdin = strings.NewReader(statement + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, redact(string(out), statement))
	}
	if strings.Contains(string(out), "ERROR:") {
		return errors.New(redact(string(out), statement))
	}
	return nil
}

// redact keeps the statement, which may hold the password, out of error messages.
func redact(out, statement string) string {
	return strings.ReplaceAll(out, statement, "[statement]")
}

// serve runs postgres until it exits, passing signals on: SIGTERM as SIGINT (fast
// shutdown), the others as they are.
func serve(c config) (int, error) {
	cmd := exec.Command(filepath.Join(c.Bin, "postgres"), "-D", c.Data,
		"-c", "listen_addresses="+c.Listen+",127.0.0.1",
		"-c", "unix_socket_directories="+c.SocketDir,
		// The image leaves out llvmjit.so and LLVM (over 100 MB); the archive's
		// queries are short and gain nothing from JIT.
		"-c", "jit=off")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() {
		for s := range signals {
			if s == syscall.SIGTERM {
				s = syscall.SIGINT
			}
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
