package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSpecFile(t *testing.T) {
	// Arguments as dockerd's containerd shim passes them to its runtime.
	global := []string{"--root", "/var/run/docker/runtime-runc/moby", "--log", "/run/c/log.json", "--log-format", "json"}
	tests := []struct {
		name     string
		args     []string
		wantFile string
		wantPath string
	}{
		{"create", append(slices.Clone(global), "create", "--bundle", "/b", "--pid-file", "/b/pid", "id"), "/b/config.json", "process.capabilities"},
		{"create, bundle=", append(slices.Clone(global), "create", "--bundle=/b", "id"), "/b/config.json", "process.capabilities"},
		{"create, -b", []string{"create", "-b", "/b", "id"}, "/b/config.json", "process.capabilities"},
		{"create in the bundle", []string{"create", "id"}, "/cwd/config.json", "process.capabilities"},
		{"run", []string{"--systemd-cgroup", "run", "--bundle", "/b", "id"}, "/b/config.json", "process.capabilities"},
		{"exec", append(slices.Clone(global), "exec", "--process", "/tmp/runc-process1", "--detach", "--pid-file", "/p", "id"), "/tmp/runc-process1", "capabilities"},
		{"exec, -p", []string{"exec", "-p", "/tmp/p.json", "id"}, "/tmp/p.json", "capabilities"},
		{"exec of a command line", []string{"exec", "id", "true"}, "", ""},
		// A global flag's value that names a command is not the command.
		{"a root named create", []string{"--root", "create", "state", "id"}, "", ""},
		{"state", append(slices.Clone(global), "state", "id"), "", ""},
		{"delete", append(slices.Clone(global), "delete", "--force", "id"), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file, path := specFile(tt.args, "/cwd")
			if file != tt.wantFile || strings.Join(path, ".") != tt.wantPath {
				t.Fatalf("specFile(%q) = %q %v; want %q %s", tt.args, file, path, tt.wantFile, tt.wantPath)
			}
		})
	}
}

const bundleSpec = `{"ociVersion":"1.0.2","process":{"args":["/sbin/init"],
"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE","CAP_SYS_ADMIN"],"effective":["CAP_SYS_RESOURCE","CAP_CHOWN"],
"inheritable":["CAP_SYS_RESOURCE"],"permitted":["CAP_CHOWN","CAP_SYS_RESOURCE"],"ambient":["CAP_SYS_RESOURCE"]}},
"linux":{"resources":{"memory":{"limit":9223372036854775807}}}}`

func TestDropCapability(t *testing.T) {
	out, err := dropCapability([]byte(bundleSpec), []string{"process", "capabilities"})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Process struct {
			Args         []string            `json:"args"`
			Capabilities map[string][]string `json:"capabilities"`
		} `json:"process"`
		Linux struct {
			Resources struct {
				Memory struct {
					Limit json.Number `json:"limit"`
				} `json:"memory"`
			} `json:"resources"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"bounding": {"CAP_CHOWN", "CAP_SYS_ADMIN"}, "effective": {"CAP_CHOWN"},
		"inheritable": {}, "permitted": {"CAP_CHOWN"}, "ambient": {},
	}
	for set, caps := range want {
		if !slices.Equal(got.Process.Capabilities[set], caps) {
			t.Errorf("%s = %v; want %v", set, got.Process.Capabilities[set], caps)
		}
	}
	if got.Process.Args[0] != "/sbin/init" || got.Linux.Resources.Memory.Limit != "9223372036854775807" {
		t.Errorf("the rest of the spec changed: %s", out)
	}

	// A spec without capabilities, and one that is not JSON.
	if out, err := dropCapability([]byte(`{"args":["sh"]}`), []string{"capabilities"}); err != nil || string(out) != `{"args":["sh"]}` {
		t.Errorf("spec without capabilities: %s, %v", out, err)
	}
	if _, err := dropCapability([]byte(`not json`), []string{"capabilities"}); err == nil {
		t.Error("a spec that is not JSON was accepted")
	}
}

// TestWrapperRunsRuncOnTheRewrittenSpec builds the wrapper and runs it as dockerd
// would, with a stand-in runc that records its arguments and the spec it was given.
func TestWrapperRunsRuncOnTheRewrittenSpec(t *testing.T) {
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "wrapper")
	if out, err := exec.Command("go", "build", "-o", wrapper, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(bundleSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	runc := filepath.Join(dir, "runc")
	script := "#!/bin/sh\necho \"$@\" >" + filepath.Join(dir, "args") + "\ncp " + filepath.Join(bundle, "config.json") + " " + filepath.Join(dir, "seen.json") + "\n"
	if err := os.WriteFile(runc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(wrapper, "--root", "/r", "create", "--bundle", bundle, "ctr1")
	cmd.Env = append(os.Environ(), "TOOLGATE_REAL_RUNC="+runc)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("wrapper: %v\n%s", err, out)
	}
	args, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(args)); got != "--root /r create --bundle "+bundle+" ctr1" {
		t.Errorf("runc got %q; want the wrapper's arguments unchanged", got)
	}
	seen, err := os.ReadFile(filepath.Join(dir, "seen.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(seen), dropped) || !strings.Contains(string(seen), "CAP_SYS_ADMIN") {
		t.Errorf("runc saw the spec %s; want every capability but %s", seen, dropped)
	}
	if info, err := os.Stat(filepath.Join(bundle, "config.json")); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("config.json mode changed: %v %v", info.Mode(), err)
	}
}
