package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallCopiesTheRunner(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "runner")
	if out, err := exec.Command(runnerBin, "install", dest).CombinedOutput(); err != nil {
		t.Fatalf("runner install: %v\n%s", err, out)
	}
	want, err := os.ReadFile(runnerBin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the installed copy (%d bytes) differs from the runner (%d bytes)", len(got), len(want))
	}
	info, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o555 {
		t.Errorf("installed mode = %o, want 555", mode)
	}
	// The copy is a working runner: with no invocation it reports an Exception.
	term := filepath.Join(t.TempDir(), "result")
	cmd := exec.Command(dest, "-workspace", t.TempDir(), "-termination-log", term)
	cmd.Env = []string{}
	if err := cmd.Run(); err == nil {
		t.Fatal("the installed runner with no invocation exited 0")
	}
	if b, _ := os.ReadFile(term); !strings.Contains(string(b), `"errorKind":"Exception"`) {
		t.Errorf("the installed runner's result = %s, want an Exception", b)
	}
}

func TestInstallErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "no destination", args: []string{"install"}, wantCode: 2, wantErr: "usage: runner install DEST"},
		{name: "two destinations", args: []string{"install", "a", "b"}, wantCode: 2, wantErr: "usage: runner install DEST"},
		{name: "missing folder", args: []string{"install", filepath.Join(t.TempDir(), "missing", "runner")}, wantCode: 1, wantErr: "the destination folder of"},
	}
	for _, tt := range tests {
		out, err := exec.Command(runnerBin, tt.args...).CombinedOutput()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != tt.wantCode || !strings.Contains(string(out), tt.wantErr) {
			t.Errorf("%s: runner %v = %v, %q; want exit %d with %q", tt.name, tt.args, err, out, tt.wantCode, tt.wantErr)
		}
	}
}
