// Command krewrelease packs the kubectl plugin's release builds and writes their krew
// plugin manifest; `make release` runs it after building the plugin for each
// platform.
//
//	krewrelease -version v0.3.0 -url https://.../v0.3.0 -dist dist [-license LICENSE] BUILD_DIR...
//
// Each BUILD_DIR is named OS_ARCH (linux_amd64) and holds the plugin's binary,
// kubectl-toolgate. Each becomes DIST/plugin/kubectl-toolgate_OS_ARCH.tar.gz, with
// the license beside the binary when one is given, and a platform of
// DIST/krew/toolgate.yaml whose uri is URL/kubectl-toolgate_OS_ARCH.tar.gz.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	k8sversion "k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"
)

const (
	// binary is the plugin's file name: kubectl runs kubectl-toolgate for `kubectl toolgate`.
	binary = "kubectl-toolgate"
	// pluginName is the name users install: kubectl krew install toolgate.
	pluginName = "toolgate"
)

// The krew manifest (krew.googlecontainertools.github.com/v1alpha2 Plugin), as far as
// toolgate fills it in.
type plugin struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   metadata   `json:"metadata"`
	Spec       pluginSpec `json:"spec"`
}

type metadata struct {
	Name string `json:"name"`
}

type pluginSpec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Platforms        []platform `json:"platforms"`
}

type platform struct {
	Selector selector `json:"selector"`
	URI      string   `json:"uri"`
	Sha256   string   `json:"sha256"`
	Files    []file   `json:"files"`
	Bin      string   `json:"bin"`
}

type selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type file struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func main() {
	version := flag.String("version", "", "the release's version, vMAJOR.MINOR.PATCH (krew requires a semantic version)")
	base := flag.String("url", "", "where the archives are downloaded from: a platform's uri is URL/kubectl-toolgate_OS_ARCH.tar.gz")
	dist := flag.String("dist", "", "the directory the archives (DIST/plugin/) and the manifest (DIST/krew/toolgate.yaml) are written to")
	license := flag.String("license", "", "a license file packed beside the binary (none when empty)")
	flag.Parse()
	if err := release(*version, *base, *dist, *license, flag.Args()); err != nil {
		fmt.Fprintf(os.Stderr, "krewrelease: %v\n", err)
		os.Exit(1)
	}
}

func release(version, base, dist, license string, builds []string) error {
	// krew parses the version with apimachinery's ParseSemantic after checking the
	// leading v: the same check here stops a release krew would refuse to install.
	if !strings.HasPrefix(version, "v") {
		return fmt.Errorf("-version %q: krew needs a semantic version with a leading v, such as v0.3.0 (set VERSION)", version)
	}
	if _, err := k8sversion.ParseSemantic(version); err != nil {
		return fmt.Errorf("-version %q: krew needs a semantic version, such as v0.3.0 (set VERSION): %w", version, err)
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("-url %q: the archives' download URL must be an http or https URL (set RELEASE_URL)", base)
	}
	if dist == "" {
		return errors.New("-dist is required")
	}
	if len(builds) == 0 {
		return errors.New("no build directory given: name at least one OS_ARCH directory holding " + binary)
	}
	for _, dir := range builds {
		if goos, goarch, ok := strings.Cut(filepath.Base(dir), "_"); !ok || goos == "" || goarch == "" {
			return fmt.Errorf("build directory %s: its name must be OS_ARCH, such as linux_amd64", dir)
		}
	}
	archives := filepath.Join(dist, "plugin")
	if err := os.MkdirAll(archives, 0o755); err != nil {
		return err
	}
	manifest := plugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   metadata{Name: pluginName},
		Spec: pluginSpec{
			Version:          version,
			Homepage:         "https://github.com/toolgate/toolgate",
			ShortDescription: "Trace, replay, approve and propose the tool calls toolgate governs",
			Description: "kubectl toolgate works with the objects toolgate keeps in the cluster: it traces\n" +
				"an AI agent's task, replays its tool calls against today's policies, approves or\n" +
				"denies the calls waiting for a human, proposes calls, and checks policies offline.\n",
		},
	}
	for _, dir := range builds {
		goos, goarch, _ := strings.Cut(filepath.Base(dir), "_")
		name := fmt.Sprintf("%s_%s_%s.tar.gz", binary, goos, goarch)
		files := []file{{From: binary, To: "."}}
		sum, err := pack(filepath.Join(archives, name), filepath.Join(dir, binary), license)
		if err != nil {
			return err
		}
		if license != "" {
			files = append(files, file{From: filepath.Base(license), To: "."})
		}
		manifest.Spec.Platforms = append(manifest.Spec.Platforms, platform{
			Selector: selector{MatchLabels: map[string]string{"os": goos, "arch": goarch}},
			URI:      strings.TrimSuffix(base, "/") + "/" + name,
			Sha256:   sum,
			Files:    files,
			Bin:      binary,
		})
	}
	data, err := yaml.Marshal(manifest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dist, "krew"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dist, "krew", pluginName+".yaml"), data, 0o644)
}

// pack writes a .tar.gz of the binary (and the license) to path and returns its
// SHA-256 in hex, as the manifest's sha256 wants it. Entries carry no time, owner or
// machine path, so that the same build packs into the same bytes.
func pack(path, bin, license string) (string, error) {
	out, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = out.Close() }()
	sum := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(out, sum))
	tw := tar.NewWriter(gz)
	if err := addFile(tw, bin, binary, 0o755); err != nil {
		return "", err
	}
	if license != "" {
		if err := addFile(tw, license, filepath.Base(license), 0o644); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

func addFile(tw *tar.Writer, src, name string, mode int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: info.Size(), Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
