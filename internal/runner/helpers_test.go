package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/protocol"
)

func TestMatchGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"*.go", "main.go", true},
		{"*.go", "pkg/main.go", false},
		{"**/*.go", "main.go", true},
		{"**/*.go", "a/b/c/main.go", true},
		{"pkg/**", "pkg/a/b", true},
		{"pkg/**", "pkg", true},
		{"pkg/**/x_test.go", "pkg/x_test.go", true},
		{"pkg/**/x_test.go", "pkg/a/b/x_test.go", true},
		{"pkg/**/x_test.go", "other/x_test.go", false},
		{"a/?/c", "a/b/c", true},
		{"a/[bc]/d", "a/e/d", false},
		{"**", "anything/at/all", true},
	} {
		pat, err := globSegments(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := matchGlob(pat, strings.Split(tc.name, "/")); got != tc.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{"[a-", "a//b", "../x", "a/./b"} {
		if _, err := globSegments(bad); err == nil {
			t.Errorf("globSegments(%q) accepted a bad pattern", bad)
		}
	}
}

func TestGlobCouldMatchBelow(t *testing.T) {
	for _, tc := range []struct {
		pattern, dir string
		want         bool
	}{
		{"src/*.go", "src", true},
		{"src/*.go", "vendor", false},
		{"src/*.go", "src/deep", false},
		{"src/**/*.go", "src/a/b", true},
		{"*/x", "anything", true},
	} {
		pat, _ := globSegments(tc.pattern)
		if got := globCouldMatchBelow(pat, strings.Split(tc.dir, "/")); got != tc.want {
			t.Errorf("globCouldMatchBelow(%q, %q) = %v, want %v", tc.pattern, tc.dir, got, tc.want)
		}
	}
}

func TestOccurrences(t *testing.T) {
	for _, tc := range []struct {
		s, needle    string
		first, count int
	}{
		{"abc", "x", -1, 0},
		{"abc", "b", 1, 1},
		{"abab", "ab", 0, 2},
		{"aaa", "aa", 0, 2}, // overlapping: replacing "the" occurrence is ambiguous
		{"x\nfoo\nfoo", "foo", 2, 2},
	} {
		first, count := occurrences(tc.s, tc.needle)
		if first != tc.first || count != tc.count {
			t.Errorf("occurrences(%q, %q) = %d, %d; want %d, %d", tc.s, tc.needle, first, count, tc.first, tc.count)
		}
	}
}

func TestSameHash(t *testing.T) {
	h := sha256Hex([]byte("x"))
	for _, tc := range []struct {
		baseline string
		want     bool
	}{
		{h, true},
		{strings.ToUpper(h), true},
		{"sha256:" + h, true},
		{h[:63], false},
		{"", false},
	} {
		if got := sameHash(tc.baseline, h); got != tc.want {
			t.Errorf("sameHash(%q) = %v, want %v", tc.baseline, got, tc.want)
		}
	}
}

func TestNextLine(t *testing.T) {
	long := strings.Repeat("x", 100)
	br := bufio.NewReaderSize(strings.NewReader("a\n\n"+long+"\nlast"), 16)
	type line struct {
		text string
		cut  bool
		err  error
	}
	var got []line
	for {
		l, cut, err := nextLine(br, 10)
		got = append(got, line{string(l), cut, err})
		if err != nil {
			break
		}
	}
	want := []line{{"a", false, nil}, {"", false, nil}, {strings.Repeat("x", 10), true, nil}, {"last", false, io.EOF}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestBashEnv(t *testing.T) {
	got := bashEnv([]string{"PATH=/custom/bin", "SECRET=x", "HOME=/root"}, "/tmp/h", map[string]string{"FOO": "bar", "LANG": "en_US.UTF-8"})
	want := []string{"FOO=bar", "GIT_CONFIG_NOSYSTEM=1", "HOME=/tmp/h", "LANG=en_US.UTF-8", "PATH=/custom/bin",
		"XDG_CACHE_HOME=/tmp/h/.cache", "XDG_CONFIG_HOME=/tmp/h/.config", "XDG_DATA_HOME=/tmp/h/.local/share", "XDG_STATE_HOME=/tmp/h/.local/state"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := bashEnv(nil, "/w", nil); !slices.Contains(got, "PATH="+defaultPath) {
		t.Errorf("no PATH in the container: %v", got)
	}
}

func TestCheckEnvName(t *testing.T) {
	for name, reserved := range map[string]bool{
		"HOME": true, "XDG_CONFIG_HOME": true, "XDG_RUNTIME_DIR": true, "GIT_CONFIG": true, "GIT_CONFIG_GLOBAL": true,
		"GIT_CONFIG_KEY_0": true, "GIT_CONFIG_PARAMETERS": true, "GIT_SSH_COMMAND": true, "CURL_HOME": true,
		"npm_config_userconfig": true, "NPM_CONFIG_GLOBALCONFIG": true, "home": true,
		// Each of home.go's homeVariables, named here so that dropping one fails.
		"WGETRC": true, "NETRC": true, "GNUPGHOME": true, "PIP_CONFIG_FILE": true, "CARGO_HOME": true,
		"RUSTUP_HOME": true, "DOCKER_CONFIG": true, "KUBECONFIG": true, "GIT_SSH": true, "GIT_ASKPASS": true,
		"SSH_ASKPASS": true, "GIT_EXEC_PATH": true, "GIT_TEMPLATE_DIR": true, "INPUTRC": true, "BASH_ENV": true, "ENV": true,
		"GOFLAGS": false, "GIT_AUTHOR_NAME": false, "LANG": false, "HOMEBREW": false,
	} {
		if got := checkEnvName(name) != nil; got != reserved {
			t.Errorf("checkEnvName(%q) refused %v, want %v", name, got, reserved)
		}
	}
}

func TestRunRecoversFromAPanickingTool(t *testing.T) {
	// A panicking tool still yields a complete, encodable Exception.
	toolFuncs["panics"] = func(_ context.Context, ic *invocationContext) error {
		ic.out.printf("before the panic\n")
		panic("boom")
	}
	t.Cleanup(func() { delete(toolFuncs, "panics") })
	inv, _ := json.Marshal(protocol.Invocation{ExecutionName: "e", Tool: "panics", Input: json.RawMessage(`{}`), TimeoutSeconds: 1, MaxOutputBytes: 4})
	var log strings.Builder
	res := Run(context.Background(), Config{WorkspaceRoot: t.TempDir(), Log: &log}, inv)
	if res.ErrorKind != protocol.KindException || res.ExitCode != 1 || !strings.Contains(res.Message, "runner panicked: boom") {
		t.Fatalf("result %+v", res)
	}
	if res.StdoutBytes != int64(len("before the panic\n")) || res.OutputSHA256 != sha256Hex([]byte(log.String())) || !res.Truncated {
		t.Errorf("output facts lost in the panic: %+v", res)
	}
	if b := protocol.EncodeResult(res); len(b) > protocol.MaxTerminationMessageBytes || !json.Valid(b) {
		t.Errorf("encoded result of %d bytes, valid %v", len(b), json.Valid(b))
	}
}

func TestSearchStopsWhenTheRunnerIsTerminated(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tool := range []string{"grep", "glob"} {
		inv, _ := json.Marshal(protocol.Invocation{ExecutionName: "e", Tool: tool, Input: json.RawMessage(`{"pattern":"x"}`), TimeoutSeconds: 60, MaxOutputBytes: 1024})
		res := Run(ctx, Config{WorkspaceRoot: t.TempDir()}, inv)
		if res.ErrorKind != protocol.KindTimeout || !strings.Contains(res.Message, "runner was terminated") {
			t.Errorf("%s: %+v", tool, res)
		}
	}
}

func TestFindBashNeverFallsBack(t *testing.T) {
	withBash := t.TempDir()
	if err := os.WriteFile(filepath.Join(withBash, "bash"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExecutable := t.TempDir()
	if err := os.WriteFile(filepath.Join(notExecutable, "bash"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
	}{
		{path: t.TempDir() + ":" + withBash, want: filepath.Join(withBash, "bash")},
		{path: notExecutable, want: ""},
		{path: "relative/dir:" + t.TempDir(), want: ""},
	} {
		got, err := findBash([]string{"HOME=/w", "PATH=" + tc.path})
		if got != tc.want {
			t.Errorf("PATH=%s: %q, want %q", tc.path, got, tc.want)
		}
		if tc.want == "" && (err == nil || !strings.Contains(err.Error(), "no bash on PATH")) {
			t.Errorf("PATH=%s: error %v, want one that says there is no bash", tc.path, err)
		}
	}
}
