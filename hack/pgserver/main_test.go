package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSetPasswordSQLQuotes(t *testing.T) {
	got := setPasswordSQL(`to"olgate`, `it's`)
	want := `ALTER ROLE "to""olgate" PASSWORD 'it''s'`
	if got != want {
		t.Fatalf("setPasswordSQL = %s, want %s", got, want)
	}
}

func TestReadPassword(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want string
		fails               bool
	}{
		{name: "plain", content: "abc", want: "abc"},
		{name: "newline", content: "abc\n", want: "abc"},
		{name: "crlf", content: "abc\r\n", want: "abc"},
		{name: "empty", content: "", fails: true},
		{name: "only-newline", content: "\n", fails: true},
		{name: "two-lines", content: "abc\ndef\n", fails: true},
	} {
		file := filepath.Join(dir, tc.name)
		if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readPassword(file)
		if tc.fails != (err != nil) || got != tc.want {
			t.Errorf("%s: readPassword = %q, %v", tc.name, got, err)
		}
	}
	if _, err := readPassword(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing password file was read")
	}
}

// The socket admits the container's user only as the role, by peer; the network
// admits nobody without the password.
func TestHBA(t *testing.T) {
	hba := hbaConf("toolgate")
	for _, line := range strings.Split(hba, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "local":
			if f[2] != "toolgate" || f[3] != "peer" || f[4] != "map=container" {
				t.Errorf("socket line %q", line)
			}
		case "host":
			if f[len(f)-1] != "scram-sha-256" {
				t.Errorf("network line without scram-sha-256: %q", line)
			}
		default:
			t.Errorf("unexpected line %q", line)
		}
	}
	if got := identConf("nonroot", "toolgate"); !strings.Contains(got, "container  nonroot  toolgate\n") {
		t.Errorf("pg_ident.conf = %q", got)
	}
}

func TestRedact(t *testing.T) {
	stmt := setPasswordSQL("toolgate", "s3cret")
	if got := redact("ERROR: near "+stmt, stmt); strings.Contains(got, "s3cret") {
		t.Errorf("redact kept the password: %q", got)
	}
}

func TestRunRefusesNoListenAddress(t *testing.T) {
	if _, err := run(config{}); err == nil || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("run without --listen: %v", err)
	}
}
