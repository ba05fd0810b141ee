package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Gate is one entry of the list: a check in the code that keeps something from
// happening, how to remove it, and the tests that must notice.
type Gate struct {
	// ID names the gate in reports; unique in the list.
	ID string `json:"id"`
	// Keeps is one line: what the gate keeps from happening.
	Keeps string `json:"keeps"`
	// File is the source file the gate lives in, relative to the repository root.
	File string `json:"file"`
	// Anchor is the code of the gate, found exactly once in File. A run of
	// whitespace in it matches any run of whitespace, so gofmt's realignment does
	// not stale the entry; everything else is matched as it is.
	Anchor string `json:"anchor"`
	// Mutation replaces Anchor to remove the gate (its trailing whitespace dropped,
	// as the anchor's match has none). It must compile.
	Mutation string `json:"mutation"`
	// Package is the package whose tests must catch the removal, as go test
	// names it (./internal/mask).
	Package string `json:"package"`
	// Run is the -run regexp of the tests that must catch it.
	Run string `json:"run"`
	// Timeout bounds one run of the tests (a Go duration); default DefaultTimeout.
	Timeout string `json:"timeout,omitempty"`
}

// DefaultTimeout bounds one run of an entry's tests when the entry names none. A
// removed gate can make a test wait for something that never comes; the timeout
// then kills the run, which counts as caught.
const DefaultTimeout = 5 * time.Minute

// timeout is g's Timeout, or DefaultTimeout.
func (g Gate) timeout() time.Duration {
	d, err := time.ParseDuration(g.Timeout)
	if err != nil || d <= 0 {
		return DefaultTimeout
	}
	return d
}

// LoadList reads the gate list at path and checks each entry's fields (not yet
// the code: see Locate).
func LoadList(path string) ([]Gate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var gates []Gate
	if err := yaml.UnmarshalStrict(data, &gates); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(gates) == 0 {
		return nil, fmt.Errorf("%s lists no gate", path)
	}
	var errs []string
	seen := map[string]bool{}
	for i, g := range gates {
		where := fmt.Sprintf("entry %d (%s)", i+1, g.ID)
		if seen[g.ID] {
			errs = append(errs, where+": the id is used twice")
		}
		seen[g.ID] = true
		if err := g.check(); err != nil {
			errs = append(errs, where+": "+err.Error())
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s:\n  %s", path, strings.Join(errs, "\n  "))
	}
	return gates, nil
}

// check reports the first field of g that is missing or malformed.
func (g Gate) check() error {
	for _, f := range []struct{ name, value string }{
		{"id", g.ID}, {"keeps", g.Keeps}, {"file", g.File}, {"anchor", g.Anchor},
		{"package", g.Package}, {"run", g.Run},
	} {
		if strings.TrimSpace(f.value) == "" {
			return fmt.Errorf("%s is empty", f.name)
		}
	}
	if strings.Contains(g.Keeps, "\n") {
		return fmt.Errorf("keeps is one line")
	}
	if filepath.IsAbs(g.File) || strings.HasPrefix(filepath.Clean(g.File), "..") {
		return fmt.Errorf("file %q is not inside the repository", g.File)
	}
	if !strings.HasPrefix(g.Package, "./") {
		return fmt.Errorf("package %q is not a ./ path of the repository", g.Package)
	}
	if squash(g.Anchor) == squash(g.Mutation) {
		return fmt.Errorf("the mutation is the anchor: it removes nothing")
	}
	for _, part := range strings.Split(g.Run, "/") {
		if _, err := regexp.Compile(part); err != nil {
			return fmt.Errorf("run %q: %w", g.Run, err)
		}
	}
	if g.Timeout != "" {
		if d, err := time.ParseDuration(g.Timeout); err != nil || d <= 0 {
			return fmt.Errorf("timeout %q is not a positive Go duration", g.Timeout)
		}
	}
	return nil
}

// squash joins s's words by one space.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// anchorPattern matches anchor with any run of whitespace where it has one.
func anchorPattern(anchor string) *regexp.Regexp {
	words := strings.Fields(anchor)
	for i, w := range words {
		words[i] = regexp.QuoteMeta(w)
	}
	return regexp.MustCompile(strings.Join(words, `\s+`))
}

// Mutate returns src with g's anchor replaced by its mutation, or an error when the
// anchor is not found exactly once: an entry whose code moved or changed is stale,
// and its gate would go unchecked.
func (g Gate) Mutate(src []byte) ([]byte, error) {
	locs := anchorPattern(g.Anchor).FindAllIndex(src, -1)
	switch len(locs) {
	case 1:
	case 0:
		return nil, fmt.Errorf("%s: the anchor is not found: the gate's code changed or moved; update the entry (anchor %q)", g.File, firstLine(g.Anchor))
	default:
		return nil, fmt.Errorf("%s: the anchor is found %d times, so which one is the gate is unclear; make it longer (anchor %q)", g.File, len(locs), firstLine(g.Anchor))
	}
	at, mutation := locs[0], strings.TrimRight(g.Mutation, " \t\n")
	out := make([]byte, 0, len(src)-(at[1]-at[0])+len(mutation))
	out = append(out, src[:at[0]]...)
	out = append(out, mutation...)
	return append(out, src[at[1]:]...), nil
}

// Locate checks every entry against the code under root: the file exists and the
// anchor is found in it exactly once. It returns one error naming every stale entry.
func Locate(root string, gates []Gate) error {
	var errs []string
	for _, g := range gates {
		src, err := os.ReadFile(filepath.Join(root, g.File))
		if err == nil {
			_, err = g.Mutate(src)
		}
		if err != nil {
			errs = append(errs, g.ID+": "+err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("stale entries in the gate list:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
