// Command runc-without-sys-resource is an OCI runtime for dockerd on hosts whose
// capability bounding set lacks CAP_SYS_RESOURCE (some sandboxed CI machines).
// `docker run --privileged`, which kind uses for its nodes, asks runc for every
// capability, and runc fails there with "unable to apply caps: operation not
// permitted". This wrapper removes that one capability from the container's process
// spec (create and run: the bundle's config.json; exec: the --process file) and then
// runs runc with the same arguments. hack/kind.sh starts dockerd with it only where
// the capability is missing; other hosts do not need it.
//
//	dockerd --add-runtime toolgate-runc=bin/runc-without-sys-resource --default-runtime toolgate-runc
//
// The real runc is TOOLGATE_REAL_RUNC, or runc on PATH.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// dropped is the capability this host cannot grant.
const dropped = "CAP_SYS_RESOURCE"

// globalFlagsWithValue are runc's global flags that take a value (runc --help): the
// command is the first argument that is neither one of them, nor their value, nor
// another flag.
var globalFlagsWithValue = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}

// specFile returns the process spec runc will read for args, and the JSON path of
// its capability sets; "" when the command starts no process (state, kill, delete...).
func specFile(args []string, cwd string) (file string, capabilities []string) {
	command, rest := "", []string(nil)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if globalFlagsWithValue[a] {
			i++
			continue
		}
		if len(a) > 0 && a[0] == '-' {
			continue
		}
		command, rest = a, args[i+1:]
		break
	}
	value := func(long, short string) string {
		for i, a := range rest {
			switch {
			case (a == long || a == short) && i+1 < len(rest):
				return rest[i+1]
			case len(a) > len(long)+1 && a[:len(long)+1] == long+"=":
				return a[len(long)+1:]
			}
		}
		return ""
	}
	switch command {
	case "create", "run":
		bundle := value("--bundle", "-b")
		if bundle == "" {
			bundle = cwd
		}
		return filepath.Join(bundle, "config.json"), []string{"process", "capabilities"}
	case "exec":
		if p := value("--process", "-p"); p != "" {
			return p, []string{"capabilities"}
		}
	}
	return "", nil
}

// dropCapability removes the dropped capability from every capability set at path
// in the JSON spec; everything else in it is kept as it was (numbers exactly).
func dropCapability(spec []byte, path []string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("reading the OCI spec: %w", err)
	}
	node := doc
	for _, key := range path {
		next, ok := node[key].(map[string]any)
		if !ok {
			return spec, nil // no capabilities: nothing to drop
		}
		node = next
	}
	for set, v := range node {
		caps, ok := v.([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(caps))
		for _, c := range caps {
			if c != dropped {
				kept = append(kept, c)
			}
		}
		node[set] = kept
	}
	return json.Marshal(doc)
}

func run(args []string) error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	if file, path := specFile(args, cwd); file != "" {
		info, err := os.Stat(file)
		if err != nil {
			return err
		}
		spec, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		out, err := dropCapability(spec, path)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if err := os.WriteFile(file, out, info.Mode().Perm()); err != nil {
			return err
		}
	}
	runc := os.Getenv("TOOLGATE_REAL_RUNC")
	if runc == "" {
		if runc, err = exec.LookPath("runc"); err != nil {
			return err
		}
	}
	return syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "runc-without-sys-resource: %v\n", err)
		os.Exit(1)
	}
}
