// Command gitserver serves the sample repository (gittest.BuildSample) over smart
// HTTP with git's own git-http-backend, behind HTTP basic authentication, for the
// e2e suite and `make demo`: a real git server in a pod, whose commits the tests
// know without asking it. It is not part of toolgate.
//
// Environment: GIT_SERVER_USER (default agent) and GIT_SERVER_TOKEN (required) are
// the only credentials it accepts.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/internal/gitws/gittest"
)

func main() {
	listen := flag.String("listen", ":8080", "Address to serve on.")
	root := flag.String("root", "/repos", "Folder of the bare repositories (NAME.git), writable.")
	backend := flag.String("backend", gittest.Backend, "Path of git-http-backend.")
	sample := flag.String("sample", "calc", "Name of the sample repository built into root at start.")
	flag.Parse()
	user, token := os.Getenv("GIT_SERVER_USER"), os.Getenv("GIT_SERVER_TOKEN")
	if user == "" {
		user = "agent"
	}
	if token == "" {
		log.Fatal("GIT_SERVER_TOKEN is empty: set the token the server accepts")
	}
	dir := filepath.Join(*root, *sample+".git")
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		commits, err := gittest.BuildSample(dir)
		if err != nil {
			log.Fatalf("building %s: %v", dir, err)
		}
		log.Printf("built %s: main %s, v1 %s, feature %s", dir, commits.Second, commits.First, commits.Feature)
	}
	git := gittest.Handler(*root, user, token, *backend)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Printf("%s %s", r.Method, r.URL)
		git.ServeHTTP(w, r)
	}))
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("serving %s on %s", *root, *listen)
	log.Fatal(srv.ListenAndServe())
}
