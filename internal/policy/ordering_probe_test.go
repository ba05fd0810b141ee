package policy

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// programGrammars are the grammars that are a program's own, by the program's name.
// git's subcommands are not here: git's grammars are checked against git by their
// own tests.
func programGrammars() map[string]*grammar {
	out := map[string]*grammar{}
	for name, g := range readOnlyGrammars {
		out[name] = g
	}
	for name, wc := range wrappers {
		out[name] = wc.grammar
	}
	for _, name := range []string{"awk", "mawk", "gawk", "nawk"} {
		out[name] = awkGrammar
	}
	out["env"], out["xargs"], out["sed"], out["tee"], out["timeout"] = envGrammar, xargsGrammar, sedGrammar, teeGrammar, timeoutGrammar
	out["watch"], out["split"], out["tar"], out["git"], out["command"] = watchGrammar, splitGrammar, tarGrammar, gitGlobal, commandGrammar
	return out
}

// orderProbe runs a program with an operand and then a word spelled as an option,
// and tells from what it printed whether it took that word for an operand.
type orderProbe struct {
	args    []string
	env     []string
	operand func(out string) bool
}

// TestGrammarOrderMatchesTheProgram holds each grammar's declared order to the
// installed program: by default PROGRAM /nonexistent --version prints the
// version only when the program reads options after operands. Programs whose
// --version says nothing have a probe of their own; one not installed here is
// skipped by name, and one that cannot be probed says why.
func TestGrammarOrderMatchesTheProgram(t *testing.T) {
	dir := t.TempDir()
	// which -a prints every match on PATH: two directories with a zzprobe each.
	for _, d := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "zzprobe"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	awkProbe := orderProbe{args: []string{`BEGIN { print "[" ARGV[1] "]" }`, "-F:"}, operand: func(out string) bool { return strings.Contains(out, "[-F:]") }}
	goFlagProbe := orderProbe{args: []string{"/nonexistent-zz", "-l"}, operand: func(out string) bool { return strings.Contains(out, "-l:") }}
	probes := map[string]orderProbe{
		"awk": awkProbe, "mawk": awkProbe, "gawk": awkProbe, "nawk": awkProbe,
		"gofmt": goFlagProbe, "goimports": goFlagProbe,
		"which": {
			args: []string{"zzprobe", "-a"}, env: []string{"PATH=" + filepath.Join(dir, "a") + ":" + filepath.Join(dir, "b")},
			operand: func(out string) bool { return !strings.Contains(out, filepath.Join(dir, "b")) },
		},
		// tar's first word is read in its old style (tar tf x) unless it is an option.
		"tar":    {args: []string{"-t", "/nonexistent-zz", "--version"}},
		"stdbuf": {args: []string{"-oL", "/nonexistent-zz", "--version"}},
	}
	cannot := map[string]string{
		"ps": "ps has no operands: a word without a dash is a bundle of BSD options",
	}
	grammars := programGrammars()
	names := make([]string, 0, len(grammars))
	for name := range grammars {
		names = append(names, name)
	}
	sort.Strings(names)
	checked := 0
	for _, name := range names {
		g := grammars[name]
		if why, ok := cannot[name]; ok {
			t.Logf("%s: not probed: %s", name, why)
			continue
		}
		if _, err := exec.LookPath(name); err != nil {
			t.Logf("%s is not installed here; its order is not checked", name)
			continue
		}
		probe, ok := probes[name]
		if !ok || probe.operand == nil {
			version, _, _ := strings.Cut(probeOutput(t, dir, name, "--version"), "\n")
			if version == "" || strings.Contains(strings.ToLower(version), "usage") || strings.Contains(version, "option") {
				t.Errorf("%s --version prints no version (%q): give it a probe of its own", name, version)
				continue
			}
			if name == "zcat" {
				version = "gzip" // zcat runs gzip -cd, which prints gzip's version
			}
			if probe.args == nil {
				probe.args = []string{"/nonexistent-zz", "--version"}
			}
			probe.operand = func(out string) bool { return !strings.Contains(out, version) }
		}
		out := probeOutputEnv(t, dir, probe.env, name, probe.args...)
		stops := probe.operand(out)
		switch {
		case stops && g.order != stopsAtOperand:
			t.Errorf("%s %s took its last word for an operand, but its grammar says it permutes: %q", name, strings.Join(probe.args, " "), out)
		case !stops && g.order != permutes:
			t.Errorf("%s %s took its last word for an option, but its grammar says it stops at its first operand: %q", name, strings.Join(probe.args, " "), out)
		}
		checked++
	}
	if checked < 60 {
		t.Errorf("only %d programs' order was checked; coreutils should be installed", checked)
	}
}
