package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// newRegistry serves go-containerregistry's in-memory registry (the distribution
// API) over plain HTTP on a loopback port, for the test's lifetime.
func newRegistry(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return srv
}

// writeArchive builds an image archive of one file and returns its path and the
// manifest digest its index.json names.
func writeArchive(t *testing.T) (archive, digest string) {
	t.Helper()
	dir := t.TempDir()
	runner := filepath.Join(dir, "runner")
	if err := os.WriteFile(runner, []byte("#!/bin/sh\necho runner\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	spec := ImageSpec{
		Tag:        "toolgate/runner:dev",
		Entries:    []Entry{{Path: "/runner", Source: runner, Mode: 0o755}},
		Entrypoint: []string{"/runner", "serve"},
		User:       "65532:65532",
		WorkingDir: "/tmp",
	}
	if err := WriteLayout(&buf, spec); err != nil {
		t.Fatal(err)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	mustJSON(t, untar(t, buf.Bytes())["index.json"], &index)
	archive = filepath.Join(dir, "runner.tar")
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return archive, index.Manifests[0].Digest
}

// TestPush pushes an archive and pulls it back as a cluster would: by tag and by
// the digest Push returned, which is the archive's own manifest digest; the config
// and the layer's files are the ones built.
func TestPush(t *testing.T) {
	srv := newRegistry(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	archive, digest := writeArchive(t)

	got, err := Push(context.Background(), archive, host+"/toolgate/runner:dev", false, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	if want := host + "/toolgate/runner@" + digest; got != want {
		t.Errorf("Push returned %q, want %q (the archive's manifest digest)", got, want)
	}

	for _, ref := range []string{host + "/toolgate/runner:dev", got} {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(r)
		if err != nil {
			t.Fatalf("pulling %s: %v", ref, err)
		}
		d, err := img.Digest()
		if err != nil || d.String() != digest {
			t.Errorf("%s: digest %s, %v; want %s", ref, d, err, digest)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(cfg.Config.Entrypoint, []string{"/runner", "serve"}) || cfg.Config.User != "65532:65532" || cfg.Config.WorkingDir != "/tmp" {
			t.Errorf("%s: config %+v", ref, cfg.Config)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v; want 1", ref, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files := untar(t, b)
		if got := string(files["runner"]); got != "#!/bin/sh\necho runner\n" {
			t.Errorf("%s: /runner = %q", ref, got)
		}
		if _, ok := files["etc/passwd"]; !ok {
			t.Errorf("%s: the layer has no etc/passwd", ref)
		}
	}
}

// TestPushInsecure: a registry under a name (not a loopback or private address)
// gets plain HTTP only with insecure; without it the push speaks TLS to a plain
// HTTP server and fails.
func TestPushInsecure(t *testing.T) {
	srv := newRegistry(t)
	archive, _ := writeArchive(t)
	// Every connection, whatever name it is for, goes to the test registry.
	dialer := &net.Dialer{}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, srv.Listener.Addr().String())
	}
	const ref = "registry.test:5000/toolgate/runner:dev"

	if _, err := Push(context.Background(), archive, ref, false, transport); err == nil || !strings.Contains(err.Error(), "HTTP response to HTTPS client") {
		t.Errorf("a push over plain HTTP without insecure: error = %v, want the TLS handshake refused", err)
	}
	got, err := Push(context.Background(), archive, ref, true, transport)
	if err != nil {
		t.Fatalf("push with insecure: %v", err)
	}
	if !strings.HasPrefix(got, "registry.test:5000/toolgate/runner@sha256:") {
		t.Errorf("Push returned %q", got)
	}
}

func TestPushRejects(t *testing.T) {
	srv := newRegistry(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	archive, _ := writeArchive(t)
	notLayout := filepath.Join(t.TempDir(), "plain.tar")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.Close()
	if err := os.WriteFile(notLayout, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	escaping := filepath.Join(t.TempDir(), "escaping.tar")
	buf.Reset()
	tw = tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "../oci-layout", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("{}"))
	_ = tw.Close()
	if err := os.WriteFile(escaping, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, archive, ref, wantErr string
	}{
		{name: "bad reference", archive: archive, ref: host + "/Toolgate/Runner:dev", wantErr: "not an image reference with a tag"},
		{name: "digest, not tag", archive: archive, ref: host + "/toolgate/runner@sha256:" + strings.Repeat("0", 64), wantErr: "not an image reference with a tag"},
		{name: "missing archive", archive: filepath.Join(t.TempDir(), "none.tar"), ref: host + "/a/b:c", wantErr: "no such file"},
		{name: "not a layout", archive: notLayout, ref: host + "/a/b:c", wantErr: "is not an OCI image layout"},
		{name: "escaping name", archive: escaping, ref: host + "/a/b:c", wantErr: "outside the layout"},
	}
	for _, tt := range tests {
		_, err := Push(context.Background(), tt.archive, tt.ref, false, http.DefaultTransport)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error = %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

// TestProbe: a registry serving the image answers; one without it, and an address
// nothing listens on, do not.
func TestProbe(t *testing.T) {
	srv := newRegistry(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	archive, _ := writeArchive(t)
	if _, err := Push(context.Background(), archive, host+"/kindest/node:v1.37.2", false, http.DefaultTransport); err != nil {
		t.Fatal(err)
	}
	if err := Probe(context.Background(), host+"/kindest/node:v1.37.2", http.DefaultTransport); err != nil {
		t.Errorf("probe of a served image: %v", err)
	}
	if err := Probe(context.Background(), host+"/kindest/node:v0.0.0", http.DefaultTransport); err == nil {
		t.Error("probe of an image the registry does not have succeeded")
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closedHost := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()
	if err := Probe(context.Background(), closedHost+"/kindest/node:v1.37.2", http.DefaultTransport); err == nil || !strings.Contains(err.Error(), "no registry serves") {
		t.Errorf("probe of an address nothing listens on: %v", err)
	}
	if err := Probe(context.Background(), "Not A Ref", http.DefaultTransport); err == nil || !strings.Contains(err.Error(), "not an image reference") {
		t.Errorf("probe of a bad reference: %v", err)
	}
}
