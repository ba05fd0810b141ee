// Command ocibuild builds a single-layer container image from files on this machine
// and writes it as an OCI image layout in a tar archive, which
// `ctr -n k8s.io images import` (and `podman load`, `skopeo`) accept; `push` writes
// such an archive to a registry (go-containerregistry). It needs no container
// engine. Usage:
//
//	ocibuild -tag toolgate/runner:dev -o runner.tar \
//	  -file bin/runner=/runner -entrypoint /runner -user 65532:65532
//	ocibuild push [-insecure] runner.tar localhost:5001/toolgate/runner:dev
//	ocibuild probe [-timeout 5s] kindest/node:v1.37.2
//
// push prints the reference by digest the registry serves the image under. probe
// exits 0 when a registry serves the image's manifest within the timeout, 1 (with
// the reason) when none does.
//
// Every image gets /etc/passwd and /etc/group naming root and nonroot (65532), and an
// empty /tmp (mode 1777). Files are owned by root; timestamps are zero, so the same
// inputs give the same image digest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "push":
			exit(push(os.Args[2:]))
		case "probe":
			exit(probe(os.Args[2:]))
		}
	}
	var spec ImageSpec
	var files, dirs, env stringList
	var entrypoint, busybox string
	out := flag.String("o", "", "Output tar archive (required).")
	flag.StringVar(&spec.Tag, "tag", "", "Image reference, such as toolgate/runner:dev (required).")
	flag.Var(&files, "file", "SRC=DEST[:MODE]: copy the file SRC to DEST in the image, with the octal MODE (default: SRC's mode). Repeatable.")
	flag.Var(&dirs, "dir", "DEST[:MODE]: an empty directory in the image (default mode 0755). Repeatable.")
	flag.Var(&env, "env", "NAME=VALUE in the image's environment. Repeatable.")
	flag.StringVar(&busybox, "busybox", "", "Path of a static busybox: installed as /bin/busybox with a /bin link for every applet it lists.")
	flag.StringVar(&entrypoint, "entrypoint", "", "The image's entrypoint, space-separated.")
	flag.StringVar(&spec.User, "user", "65532:65532", "The numeric UID:GID the image runs as.")
	flag.StringVar(&spec.WorkingDir, "workdir", "", "The image's working directory.")
	flag.Parse()

	if err := build(&spec, *out, files, dirs, env, entrypoint, busybox); err != nil {
		fmt.Fprintf(os.Stderr, "ocibuild: %v\n", err)
		os.Exit(1)
	}
}

func build(spec *ImageSpec, out string, files, dirs, env []string, entrypoint, busybox string) error {
	if out == "" {
		return fmt.Errorf("-o is required: name the tar archive to write")
	}
	if entrypoint != "" {
		spec.Entrypoint = strings.Fields(entrypoint)
	}
	spec.Env = env
	for _, f := range files {
		entry, err := ParseFileFlag(f)
		if err != nil {
			return err
		}
		spec.Entries = append(spec.Entries, entry)
	}
	for _, d := range dirs {
		entry, err := ParseDirFlag(d)
		if err != nil {
			return err
		}
		spec.Entries = append(spec.Entries, entry)
	}
	if busybox != "" {
		entries, err := BusyboxEntries(busybox)
		if err != nil {
			return err
		}
		spec.Entries = append(spec.Entries, entries...)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := WriteLayout(f, *spec); err != nil {
		f.Close()
		os.Remove(out)
		return err
	}
	return f.Close()
}

func exit(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "ocibuild: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	insecure := fs.Bool("insecure", false, "Allow plain HTTP to the registry (one named by a loopback or private address gets it anyway).")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ocibuild push [-insecure] ARCHIVE REGISTRY/REPOSITORY:TAG")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	if fs.NArg() != 2 {
		return fmt.Errorf("push wants an archive and a reference, such as: push bin/images/runner.tar localhost:5001/toolgate/runner:dev")
	}
	ref, err := Push(context.Background(), fs.Arg(0), fs.Arg(1), *insecure, remote.DefaultTransport)
	if err != nil {
		return err
	}
	fmt.Println(ref)
	return nil
}

func probe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	timeout := fs.Duration("timeout", 5*time.Second, "How long to wait for the registry.")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ocibuild probe [-timeout 5s] IMAGE")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("probe wants one image reference, such as: probe kindest/node:v1.37.2")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return Probe(ctx, fs.Arg(0), remote.DefaultTransport)
}
