package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFullName(t *testing.T) {
	tests := []struct {
		ref, want, wantErr string
	}{
		{ref: "toolgate/runner:dev", want: "docker.io/toolgate/runner:dev"},
		{ref: "busybox", want: "docker.io/library/busybox:latest"},
		{ref: "registry.example:5000/a/b:v1", want: "registry.example:5000/a/b:v1"},
		{ref: "localhost/x:1", want: "localhost/x:1"},
		{ref: "Toolgate/runner:dev", wantErr: "lower-case"},
		{ref: "a/b@sha256:00", wantErr: "lower-case"},
		{ref: "a/b:", wantErr: "lower-case"},
	}
	for _, tt := range tests {
		got, err := FullName(tt.ref)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("FullName(%q) error = %v, want one containing %q", tt.ref, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("FullName(%q) = %q, %v; want %q", tt.ref, got, err, tt.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(src, []byte("x"), 0o750); err != nil {
		t.Fatal(err)
	}
	fileTests := []struct {
		flag    string
		want    Entry
		wantErr string
	}{
		{flag: src + "=/runner:0755", want: Entry{Source: src, Path: "/runner", Mode: 0o755}},
		{flag: src + "=/runner", want: Entry{Source: src, Path: "/runner", Mode: 0o750}},
		{flag: src + "=runner:0755", wantErr: "absolute path"},
		{flag: src + "=/runner:rwx", wantErr: "octal"},
		{flag: "/runner", wantErr: "SRC=DEST"},
		{flag: src + ".missing=/runner", wantErr: "no such file"},
	}
	for _, tt := range fileTests {
		got, err := ParseFileFlag(tt.flag)
		checkParse(t, "-file "+tt.flag, got, err, tt.want, tt.wantErr)
	}
	dirTests := []struct {
		flag    string
		want    Entry
		wantErr string
	}{
		{flag: "/workspace", want: Entry{Path: "/workspace", Dir: true, Mode: 0o755}},
		{flag: "/scratch:1777", want: Entry{Path: "/scratch", Dir: true, Mode: 0o1777}},
		{flag: "scratch", wantErr: "absolute path"},
		{flag: "/scratch:99", wantErr: "octal"},
	}
	for _, tt := range dirTests {
		got, err := ParseDirFlag(tt.flag)
		checkParse(t, "-dir "+tt.flag, got, err, tt.want, tt.wantErr)
	}
}

func checkParse(t *testing.T, flag string, got Entry, err error, want Entry, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: error = %v, want one containing %q", flag, err, wantErr)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %v", flag, err)
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", flag, diff)
	}
}

// TestWriteLayout reads the archive back the way an importer does: index.json ->
// manifest -> config and layer, checking every digest and size, then the layer's
// files.
func TestWriteLayout(t *testing.T) {
	dir := t.TempDir()
	runner := filepath.Join(dir, "runner")
	if err := os.WriteFile(runner, []byte("#!/bin/sh\necho runner\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A stand-in busybox that lists its applets like the real one.
	busybox := filepath.Join(dir, "busybox")
	if err := os.WriteFile(busybox, []byte("#!/bin/sh\nprintf 'busybox\\nsh\\nawk\\n'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bbEntries, err := BusyboxEntries(busybox)
	if err != nil {
		t.Fatal(err)
	}
	spec := ImageSpec{
		Tag:        "toolgate/runner:dev",
		Entries:    append([]Entry{{Path: "/opt/tool/runner", Source: runner, Mode: 0o755}, {Path: "/workspace", Dir: true, Mode: 0o775}}, bbEntries...),
		Entrypoint: []string{"/opt/tool/runner"},
		User:       "65532:65532",
		WorkingDir: "/workspace",
	}
	var buf bytes.Buffer
	if err := WriteLayout(&buf, spec); err != nil {
		t.Fatal(err)
	}
	files := untar(t, buf.Bytes())
	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", got)
	}

	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	mustJSON(t, files["index.json"], &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests, want 1", len(index.Manifests))
	}
	if got := index.Manifests[0].Annotations[annotationImageName]; got != "docker.io/toolgate/runner:dev" {
		t.Errorf("image name annotation = %q", got)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	mustJSON(t, blob(t, files, index.Manifests[0]), &manifest)
	var cfg imageConfig
	mustJSON(t, blob(t, files, manifest.Config), &cfg)
	if cfg.Config.User != "65532:65532" || cfg.Config.WorkingDir != "/workspace" || !cmp.Equal(cfg.Config.Entrypoint, []string{"/opt/tool/runner"}) {
		t.Errorf("config = %+v", cfg.Config)
	}
	if len(manifest.Layers) != 1 {
		t.Fatalf("manifest has %d layers, want 1", len(manifest.Layers))
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, manifest.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if got := digestOf(layer); !cmp.Equal(cfg.RootFS.DiffIDs, []string{got}) {
		t.Errorf("diff_ids = %v, want [%s]", cfg.RootFS.DiffIDs, got)
	}

	type object struct {
		Type     byte
		Mode     int64
		Uid      int
		Linkname string
		Content  string
	}
	got := map[string]object{}
	tr := tar.NewReader(bytes.NewReader(layer))
	var order []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[hdr.Name] = object{hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Linkname, string(b)}
		order = append(order, hdr.Name)
	}
	want := map[string]object{
		"bin/":            {Type: tar.TypeDir, Mode: 0o755},
		"bin/awk":         {Type: tar.TypeSymlink, Mode: 0o777, Linkname: "busybox"},
		"bin/busybox":     {Type: tar.TypeReg, Mode: 0o755, Content: "#!/bin/sh\nprintf 'busybox\\nsh\\nawk\\n'\n"},
		"bin/sh":          {Type: tar.TypeSymlink, Mode: 0o777, Linkname: "busybox"},
		"etc/":            {Type: tar.TypeDir, Mode: 0o755},
		"etc/group":       {Type: tar.TypeReg, Mode: 0o644, Content: baseContent["/etc/group"]},
		"etc/passwd":      {Type: tar.TypeReg, Mode: 0o644, Content: baseContent["/etc/passwd"]},
		"opt/":            {Type: tar.TypeDir, Mode: 0o755},
		"opt/tool/":       {Type: tar.TypeDir, Mode: 0o755},
		"opt/tool/runner": {Type: tar.TypeReg, Mode: 0o755, Content: "#!/bin/sh\necho runner\n"},
		"tmp/":            {Type: tar.TypeDir, Mode: 0o1777},
		"workspace/":      {Type: tar.TypeDir, Mode: 0o775},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer (-want +got):\n%s", diff)
	}
	wantOrder := []string{"bin/", "bin/awk", "bin/busybox", "bin/sh", "etc/", "etc/group", "etc/passwd", "opt/", "opt/tool/", "opt/tool/runner", "tmp/", "workspace/"}
	if diff := cmp.Diff(wantOrder, order); diff != "" {
		t.Errorf("layer order, parents first (-want +got):\n%s", diff)
	}

	// The same inputs give the same bytes, so rebuilding an unchanged image is a no-op.
	var again bytes.Buffer
	if err := WriteLayout(&again, spec); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("two builds of the same spec differ")
	}
}

func TestWriteLayoutRejects(t *testing.T) {
	tests := []struct {
		name    string
		spec    ImageSpec
		wantErr string
	}{
		{name: "user name", spec: ImageSpec{Tag: "a/b:c", User: "nonroot"}, wantErr: "numeric UID:GID"},
		{name: "duplicate", spec: ImageSpec{Tag: "a/b:c", Entries: []Entry{{Path: "/tmp", Dir: true}}}, wantErr: "/tmp is in the image twice"},
		{name: "bad tag", spec: ImageSpec{Tag: "A:b"}, wantErr: "lower-case"},
		{name: "missing source", spec: ImageSpec{Tag: "a/b:c", Entries: []Entry{{Path: "/x", Source: "/nonexistent/x"}}}, wantErr: "reading /nonexistent/x"},
	}
	for _, tt := range tests {
		err := WriteLayout(io.Discard, tt.spec)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error = %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name], _ = io.ReadAll(tr)
	}
}

// blob returns the blob d points to, failing when its size or digest is wrong.
func blob(t *testing.T, files map[string][]byte, d descriptor) []byte {
	t.Helper()
	b, ok := files[blobPath(d.Digest)]
	if !ok {
		t.Fatalf("blob %s is not in the archive", d.Digest)
	}
	if int64(len(b)) != d.Size || digestOf(b) != d.Digest {
		t.Fatalf("blob %s: size %d digest %s do not match its descriptor (size %d)", d.Digest, len(b), digestOf(b), d.Size)
	}
	return b
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
}
