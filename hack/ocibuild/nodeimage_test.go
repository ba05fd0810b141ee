package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKindNodeImage runs `hack/kind.sh node-image`, which `make demo` asks which node
// image to use: kind's stock image when a registry serves it, none (build it from
// source) when no registry answers. KIND_STOCK_NODE_IMAGE points it at a registry of
// the test's, serving a manifest under the stock image's name, or at an address
// nothing listens on.
func TestKindNodeImage(t *testing.T) {
	srv := newRegistry(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	archive, _ := writeArchive(t)
	served := host + "/kindest/node:v1.37.2"
	if _, err := Push(context.Background(), archive, served, false, http.DefaultTransport); err != nil {
		t.Fatal(err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	unserved := strings.TrimPrefix(closed.URL, "http://") + "/kindest/node:v1.37.2"
	closed.Close()

	nodeImage := func(stock string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join("..", "kind.sh"), "node-image")
		cmd.Env = append(cmd.Environ(), "KIND_STOCK_NODE_IMAGE="+stock)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("kind.sh node-image: %v\n%s", err, errOut.String())
		}
		return out.String(), errOut.String()
	}

	out, msg := nodeImage(served)
	if out != served+"\n" {
		t.Errorf("with a registry serving %s: stdout %q, want the stock image", served, out)
	}
	if !strings.Contains(msg, "a registry serves "+served+": the cluster runs on kind's stock node image") {
		t.Errorf("with a registry serving %s: stderr %q does not say the stock image is used", served, msg)
	}

	out, msg = nodeImage(unserved)
	if out != "" {
		t.Errorf("with no registry: stdout %q, want nothing (build the node image)", out)
	}
	if !strings.Contains(msg, "no registry serves "+unserved+": the node image is built from source (") {
		t.Errorf("with no registry: stderr %q does not say the node image is built from source", msg)
	}
}
