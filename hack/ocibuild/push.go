package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push writes the image of archive (an OCI image layout in a tar, as WriteLayout
// makes) to the registry as ref, and returns the reference by digest the registry
// now serves it under (repository@sha256:...). The manifest's bytes are the
// archive's, so the digest is the one the archive already had. insecure allows
// plain HTTP to a registry whose name is not a loopback or private address (those
// get plain HTTP anyway, as go-containerregistry decides).
func Push(ctx context.Context, archive, ref string, insecure bool, transport http.RoundTripper) (string, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("push: %q is not an image reference with a tag, such as localhost:5001/toolgate/runner:dev: %w", ref, err)
	}
	dir, err := os.MkdirTemp("", "ocibuild-push-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := unpackLayout(archive, dir); err != nil {
		return "", fmt.Errorf("push: reading %s: %w", archive, err)
	}
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", fmt.Errorf("push: %s is not an OCI image layout: %w", archive, err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return "", fmt.Errorf("push: %s: %w", archive, err)
	}
	if len(manifest.Manifests) != 1 {
		return "", fmt.Errorf("push: %s holds %d images, want exactly one", archive, len(manifest.Manifests))
	}
	img, err := index.Image(manifest.Manifests[0].Digest)
	if err != nil {
		return "", fmt.Errorf("push: %s: %w", archive, err)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithTransport(transport)); err != nil {
		return "", fmt.Errorf("push: writing %s: %w", tag, err)
	}
	return tag.Context().Digest(manifest.Manifests[0].Digest.String()).String(), nil
}

// unpackLayout unpacks the regular files of the tar archive into dir. Only names that stay
// inside dir are accepted.
func unpackLayout(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("the archive names %q, outside the layout", hdr.Name)
		}
		dest := filepath.Join(dir, hdr.Name)
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		out, err := os.Create(dest)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

// Probe reports whether a registry answers for ref: it serves ref's manifest. The
// demo asks it whether kind's stock node image can be pulled.
func Probe(ctx context.Context, ref string, transport http.RoundTripper) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("probe: %q is not an image reference: %w", ref, err)
	}
	if _, err := remote.Head(r, remote.WithContext(ctx), remote.WithTransport(transport)); err != nil {
		return fmt.Errorf("probe: no registry serves %s: %w", r, err)
	}
	return nil
}
