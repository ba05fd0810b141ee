package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/testenv"
)

// releaseVersion is the version the test releases: a semantic version, as krew needs,
// that no real build carries, so that the installed plugin printing it proves the
// binary krew installed is the one `make release` stamped.
const releaseVersion = "v0.0.0-krewtest"

// TestInstallThroughKrew runs `make release` for this machine's platform with the
// archives' URL pointing at a local HTTP server, puts the manifest it wrote into a
// local index (a git repository, as krew wants it), and has krew (TOOLGATE_KREW, which
// make test builds) add the index, install toolgate from it and run nothing else;
// then the installed kubectl-toolgate prints the released version.
func TestInstallThroughKrew(t *testing.T) {
	krew := os.Getenv("TOOLGATE_KREW")
	if krew == "" {
		t.Fatal("TOOLGATE_KREW is not set: run `make test`, or `make krew` and set TOOLGATE_KREW to the krew it builds in bin/")
	}
	tmp := t.TempDir()
	dist := filepath.Join(tmp, "dist")

	// Every archive krew fetches is recorded, to check it came from here.
	var mu sync.Mutex
	var served []string
	// Served under /VERSION/, as a GitHub release's downloads are.
	files := http.StripPrefix("/"+releaseVersion, http.FileServer(http.Dir(filepath.Join(dist, "plugin"))))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()
		files.ServeHTTP(w, r)
	}))
	defer srv.Close()

	platform := runtime.GOOS + "/" + runtime.GOARCH
	runIn(t, testenv.RepoRoot(), nil, "make", "--no-print-directory", "release",
		"VERSION="+releaseVersion, "PLUGIN_PLATFORMS="+platform, "RELEASE_URL="+srv.URL+"/"+releaseVersion, "DIST="+dist)
	manifest := filepath.Join(dist, "krew", "toolgate.yaml")
	checkManifest(t, manifest, srv.URL+"/"+releaseVersion+"/kubectl-toolgate_"+runtime.GOOS+"_"+runtime.GOARCH+".tar.gz")

	// The index: a git repository with plugins/toolgate.yaml, the manifest as written.
	index := filepath.Join(tmp, "index")
	if err := os.MkdirAll(filepath.Join(index, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(index, "plugins", "toolgate.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// HOME is the test's: git and krew read no configuration of this machine's user.
	home := filepath.Join(tmp, "home")
	krewRoot := filepath.Join(tmp, "krew")
	env := []string{"HOME=" + home, "KREW_ROOT=" + krewRoot, "KREW_NO_UPGRADE_CHECK=1",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com"}
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	runIn(t, index, env, "git", "init", "-q")
	runIn(t, index, env, "git", "add", "plugins/toolgate.yaml")
	runIn(t, index, env, "git", "commit", "-q", "-m", "toolgate")

	runIn(t, tmp, env, krew, "index", "add", "local", index)
	out := runIn(t, tmp, env, krew, "install", "local/toolgate")
	if !strings.Contains(out, `Installed plugin: toolgate`) {
		t.Fatalf("krew install said:\n%s", out)
	}
	mu.Lock()
	want := "/" + releaseVersion + "/kubectl-toolgate_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz"
	if len(served) != 1 || served[0] != want {
		t.Fatalf("the server was asked for %q, want exactly %s", served, want)
	}
	mu.Unlock()

	// krew links the plugin into KREW_ROOT/bin, the directory users put on PATH.
	out = runIn(t, tmp, env, filepath.Join(krewRoot, "bin", "kubectl-toolgate"), "version", "--client")
	if want := "plugin:     " + releaseVersion + "\n"; out != want {
		t.Fatalf("the installed plugin printed %q, want %q", out, want)
	}
	out = runIn(t, tmp, env, krew, "list")
	if !strings.Contains(out, "toolgate") {
		t.Fatalf("krew list does not name toolgate:\n%s", out)
	}
}

// checkManifest reads the manifest as krew's own types would and checks the fields
// krew acts on for this platform.
func checkManifest(t *testing.T, path, wantURI string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p plugin
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "toolgate" || p.Spec.Version != releaseVersion {
		t.Fatalf("%s: %s %s %s version %s", path, p.APIVersion, p.Kind, p.Metadata.Name, p.Spec.Version)
	}
	if len(p.Spec.Platforms) != 1 {
		t.Fatalf("%s has %d platforms, want the one built", path, len(p.Spec.Platforms))
	}
	pl := p.Spec.Platforms[0]
	if pl.URI != wantURI || pl.Bin != "kubectl-toolgate" || pl.Selector.MatchLabels["os"] != runtime.GOOS || pl.Selector.MatchLabels["arch"] != runtime.GOARCH {
		t.Fatalf("%s: platform %+v, want uri %s", path, pl, wantURI)
	}
}

// runIn runs a command in dir, with env added to this process's (less make's own
// variables, so that the test's make is not steered by a make that runs the test),
// and returns its output; it fails the test with the output when the command fails.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "MAKEFLAGS" && k != "MAKELEVEL" && k != "MFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestReleaseRefusesWhatKrewWould: a release krew could not install stops before
// anything is packed, naming the variable to set.
func TestReleaseRefusesWhatKrewWould(t *testing.T) {
	build := filepath.Join(t.TempDir(), "linux_amd64")
	for _, tc := range []struct {
		name, version, url, dir, want string
	}{
		{"a commit for a version", "b38ebf3", "https://example.com/r", build, `-version "b38ebf3": krew needs a semantic version with a leading v, such as v0.3.0 (set VERSION)`},
		{"a version that is not semantic", "v1.2", "https://example.com/r", build, `-version "v1.2": krew needs a semantic version, such as v0.3.0 (set VERSION)`},
		{"no URL", "v1.2.3", "", build, `-url "": the archives' download URL must be an http or https URL (set RELEASE_URL)`},
		{"a file URL", "v1.2.3", "file:///tmp/r", build, `-url "file:///tmp/r": the archives' download URL must be an http or https URL (set RELEASE_URL)`},
		{"a build directory not named OS_ARCH", "v1.2.3", "https://example.com/r", filepath.Join(t.TempDir(), "linux"), "its name must be OS_ARCH, such as linux_amd64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dist := t.TempDir()
			err := release(tc.version, tc.url, dist, "", []string{tc.dir})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("release: %v, want an error with %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(dist); len(entries) != 0 {
				t.Fatalf("a refused release wrote %d entries into DIST", len(entries))
			}
		})
	}
}
