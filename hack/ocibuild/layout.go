package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// OCI media types (image-spec v1.1).
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"

	// annotationRefName is the tag in index.json; annotationImageName is the full
	// name containerd gives the image on import.
	annotationRefName   = "org.opencontainers.image.ref.name"
	annotationImageName = "io.containerd.image.name"

	defaultPath = "/usr/local/bin:/usr/bin:/bin"
)

// Entry is one file system object of the image's layer.
type Entry struct {
	// Path is absolute inside the image.
	Path string
	// Source is the file on this machine whose content is copied; empty for a
	// directory or a symlink.
	Source string
	// Dir makes an empty directory.
	Dir bool
	// Linkname makes a symlink to it.
	Linkname string
	// Mode is the permission bits (and sticky bit).
	Mode int64
}

// ImageSpec says what the image contains and how it runs.
type ImageSpec struct {
	// Tag is the reference, such as toolgate/runner:dev.
	Tag        string
	Entries    []Entry
	Entrypoint []string
	Env        []string
	// User is a numeric UID:GID: the Job runs with runAsNonRoot, which the kubelet can
	// only check for a numeric user.
	User       string
	WorkingDir string
}

// ParseFileFlag parses SRC=DEST[:MODE].
func ParseFileFlag(v string) (Entry, error) {
	src, dest, ok := strings.Cut(v, "=")
	if !ok || src == "" || dest == "" {
		return Entry{}, fmt.Errorf("-file %q: want SRC=DEST[:MODE], such as bin/runner=/runner:0755", v)
	}
	e := Entry{Source: src, Path: dest}
	if d, mode, ok := strings.Cut(dest, ":"); ok {
		m, err := strconv.ParseInt(mode, 8, 32)
		if err != nil || m < 0 || m > 0o7777 {
			return Entry{}, fmt.Errorf("-file %q: mode %q is not an octal permission such as 0755", v, mode)
		}
		e.Path, e.Mode = d, m
	} else {
		info, err := os.Stat(src)
		if err != nil {
			return Entry{}, fmt.Errorf("-file %q: %w", v, err)
		}
		e.Mode = int64(info.Mode().Perm())
	}
	if !path.IsAbs(e.Path) {
		return Entry{}, fmt.Errorf("-file %q: the destination %q must be an absolute path in the image", v, e.Path)
	}
	return e, nil
}

// ParseDirFlag parses DEST[:MODE].
func ParseDirFlag(v string) (Entry, error) {
	e := Entry{Path: v, Dir: true, Mode: 0o755}
	if d, mode, ok := strings.Cut(v, ":"); ok {
		m, err := strconv.ParseInt(mode, 8, 32)
		if err != nil || m < 0 || m > 0o7777 {
			return Entry{}, fmt.Errorf("-dir %q: mode %q is not an octal permission such as 1777", v, mode)
		}
		e.Path, e.Mode = d, m
	}
	if !path.IsAbs(e.Path) {
		return Entry{}, fmt.Errorf("-dir %q: %q must be an absolute path in the image", v, e.Path)
	}
	return e, nil
}

// BusyboxEntries installs a static busybox as /bin/busybox with a link in /bin for
// each applet it lists.
func BusyboxEntries(busybox string) ([]Entry, error) {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("-busybox %s: listing its applets: %w", busybox, err)
	}
	entries := []Entry{{Path: "/bin/busybox", Source: busybox, Mode: 0o755}}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		entries = append(entries, Entry{Path: "/bin/" + applet, Linkname: "busybox", Mode: 0o777})
	}
	return entries, nil
}

// baseEntries are in every image: users for tools that look the uid up, and /tmp.
func baseEntries() []Entry {
	return []Entry{
		{Path: "/etc/passwd", Mode: 0o644},
		{Path: "/etc/group", Mode: 0o644},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	}
}

var baseContent = map[string]string{
	"/etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
	"/etc/group":  "root:x:0:\nnonroot:x:65532:\n",
}

// LayerTar writes the entries as a tar stream: parents before children, sorted,
// owned by root, with zero timestamps.
func LayerTar(w io.Writer, entries []Entry) error {
	all := append(baseEntries(), entries...)
	byPath := map[string]Entry{}
	for _, e := range all {
		p := path.Clean(e.Path)
		if _, dup := byPath[p]; dup {
			return fmt.Errorf("%s is in the image twice", p)
		}
		e.Path = p
		byPath[p] = e
	}
	// Every parent directory exists in the layer, so the tar unpacks anywhere.
	for p := range byPath {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = Entry{Path: dir, Dir: true, Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	for _, p := range paths {
		e := byPath[p]
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: e.Mode, ModTime: epoch, Format: tar.FormatPAX}
		var content []byte
		switch {
		case e.Dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case e.Linkname != "":
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Linkname
		case e.Source != "":
			b, err := os.ReadFile(e.Source)
			if err != nil {
				return fmt.Errorf("reading %s for %s: %w", e.Source, p, err)
			}
			content = b
		default:
			c, ok := baseContent[p]
			if !ok {
				return fmt.Errorf("%s has no source file", p)
			}
			content = []byte(c)
		}
		if hdr.Typeflag == 0 {
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(content); err != nil {
			return err
		}
	}
	return tw.Close()
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User       string   `json:"User,omitempty"`
		Env        []string `json:"Env,omitempty"`
		Entrypoint []string `json:"Entrypoint,omitempty"`
		WorkingDir string   `json:"WorkingDir,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// FullName is the name containerd and the kubelet use for ref: a reference without a
// registry is on docker.io, and a one-part name is in library/.
func FullName(ref string) (string, error) {
	name, tag := ref, "latest"
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i+1:]
	}
	if name == "" || tag == "" || strings.Contains(ref, "@") || strings.ToLower(name) != name {
		return "", fmt.Errorf("-tag %q is not a lower-case image reference such as toolgate/runner:dev", ref)
	}
	parts := strings.Split(name, "/")
	first := parts[0]
	if len(parts) == 1 || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		if len(parts) == 1 {
			name = "library/" + name
		}
		name = "docker.io/" + name
	}
	return name + ":" + tag, nil
}

// WriteLayout writes spec as an OCI image layout in a tar archive.
func WriteLayout(w io.Writer, spec ImageSpec) error {
	fullName, err := FullName(spec.Tag)
	if err != nil {
		return err
	}
	if spec.User != "" {
		uid, gid, _ := strings.Cut(spec.User, ":")
		for _, id := range []string{uid, gid} {
			if _, err := strconv.ParseUint(id, 10, 32); err != nil {
				return fmt.Errorf("-user %q: want a numeric UID:GID such as 65532:65532 (runAsNonRoot needs a number)", spec.User)
			}
		}
	}

	var layer, compressed bytes.Buffer
	if err := LayerTar(&layer, spec.Entries); err != nil {
		return err
	}
	diffID := digestOf(layer.Bytes())
	gz, _ := gzip.NewWriterLevel(&compressed, gzip.BestSpeed)
	if _, err := gz.Write(layer.Bytes()); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}

	var cfg imageConfig
	// The files are this machine's binaries, so the image is for this machine.
	cfg.Architecture, cfg.OS = runtime.GOARCH, "linux"
	cfg.Config.User = spec.User
	cfg.Config.Entrypoint = spec.Entrypoint
	cfg.Config.WorkingDir = spec.WorkingDir
	cfg.Config.Env = append([]string{"PATH=" + defaultPath}, spec.Env...)
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{diffID}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}

	manifest := struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}{
		SchemaVersion: 2,
		MediaType:     mediaTypeManifest,
		Config:        descriptor{MediaType: mediaTypeConfig, Digest: digestOf(cfgJSON), Size: int64(len(cfgJSON))},
		Layers:        []descriptor{{MediaType: mediaTypeLayer, Digest: digestOf(compressed.Bytes()), Size: int64(compressed.Len())}},
	}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	index := struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Manifests     []descriptor `json:"manifests"`
	}{
		SchemaVersion: 2,
		MediaType:     mediaTypeIndex,
		Manifests: []descriptor{{
			MediaType: mediaTypeManifest,
			Digest:    digestOf(manifestJSON),
			Size:      int64(len(manifestJSON)),
			Platform:  &platform{Architecture: cfg.Architecture, OS: cfg.OS},
			Annotations: map[string]string{
				annotationImageName: fullName,
				annotationRefName:   fullName[strings.LastIndex(fullName, ":")+1:],
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	add := func(name string, content []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(content)
		return err
	}
	files := []struct {
		name    string
		content []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
		{blobPath(manifest.Config.Digest), cfgJSON},
		{blobPath(manifest.Layers[0].Digest), compressed.Bytes()},
		{blobPath(index.Manifests[0].Digest), manifestJSON},
	}
	for _, f := range files {
		if err := add(f.name, f.content); err != nil {
			return err
		}
	}
	return tw.Close()
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}
