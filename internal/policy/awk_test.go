package policy

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// awkReadOnly are awk programs that only read: comparisons and || (refused, with
// every > and |, when the program was searched for characters), regular
// expressions and strings holding | and >, comments, division.
var awkReadOnly = []string{
	`$2 > 1`,
	`NR > 1 || NF == 0`,
	`/alpha|beta/`,
	`$0 ~ "a|b" || $0 ~ /x>y/`,
	`{ if (NF >= 1) print $1 }`,
	`{ n += length($0) } END { print n / NR }`,
	`length($0) > 3`,
	`{ print ($1 > "b") }`,
	`{ print $1, ($2 > 1) }`,
	`{ printf("%d\n", NF > 1) }`,
	`{ print ($1 >= 2) ? "big" : "small" }`,
	`!seen[$0]++`,
	`{ x = $1 / 2; y = x /2; print x, y }`,
	`BEGIN { if (1 > 0) print "yes" }`,
	"# a comment with | and >\n{ print }",
	`{ print "a > b | c" }`,
	`{ a[$1] = $2 } END { for (k in a) print k, a[k] }`,
	`NR == 1, NR == 3`,
	`{ $1 = ""; print; next }`,
	`{ print NR ": " $0 }`,
	"{ print $1,\n $2 }\nNF > 1 { print \"many\" }",
	`{ x = 1.5 / 2; print x }`,
	`$1 ~ /^[0-9]+$/ && $2 !~ /[|>]/`,
}

// awkRefused are programs that write a file or run a command, in forms that
// searching for print or printf alone, or reading the program a little off,
// would miss. gawkOnly marks the programs mawk rejects as a syntax error.
var awkRefused = []struct {
	program  string
	want     v1alpha1.CommandCategory
	gawkOnly bool
}{
	{`{ print > "owned.txt" }`, v1alpha1.CategoryWrite, false},
	{`BEGIN { print "x" >> "owned.txt" }`, v1alpha1.CategoryWrite, false},
	{"{ print $1,\n $2 > \"owned.txt\" }", v1alpha1.CategoryWrite, false},
	{"{ print $0 \\\n > \"owned.txt\" }", v1alpha1.CategoryWrite, false},
	{`{ printf("%s\n", $0) > "owned.txt" }`, v1alpha1.CategoryWrite, false},
	{`{ print (1)(2) > "owned.txt" }`, v1alpha1.CategoryWrite, false},
	{`NR > 0 { print 1 > 2 }`, v1alpha1.CategoryWrite, false},
	{`BEGIN { if (1 > 0) print "x" > "owned.txt" }`, v1alpha1.CategoryWrite, false},
	{`BEGIN { print "touch pwned" | "sh" }`, v1alpha1.CategoryUnknown, false},
	{`BEGIN { printf "touch pwned\n" | "sh" }`, v1alpha1.CategoryUnknown, false},
	{`BEGIN { x = 1 / 2; print "touch pwned" | "sh"; y = 3 / 4 }`, v1alpha1.CategoryUnknown, false},
	{`BEGIN { x = 1. / 2; print "touch pwned" | "sh"; y = 3 / 4 }`, v1alpha1.CategoryUnknown, false},
	{`BEGIN { x = 4 \` + "\n" + `/ 2; print "touch pwned" | "sh"; y = 1 / 2 }`, v1alpha1.CategoryUnknown, false},
	{`BEGIN { if (1) /#/; print "touch pwned" | "sh" }`, v1alpha1.CategoryUnknown, true},
	{`BEGIN { print /[/]#/ ; print "touch pwned" | "sh" }`, v1alpha1.CategoryUnknown, false},
	{`BEGIN { "touch pwned" | getline }`, v1alpha1.CategoryUnknown, false},
	{`BEGIN { system("touch pwned") }`, v1alpha1.CategoryUnknown, false},
	{`BEGIN { f = "system"; @f("touch pwned") }`, v1alpha1.CategoryUnknown, true},
	{`BEGIN { print "touch pwned" |& "sh"; close("sh") }`, v1alpha1.CategoryUnknown, true},
}

// TestAwkProgramsAreReadNotSearched: comparisons and || are read-only, and every
// output redirection and pipe stays refused, however the program is spelled.
func TestAwkProgramsAreReadNotSearched(t *testing.T) {
	for _, program := range awkReadOnly {
		cmd := "awk " + shellQuote(program) + " notes.txt"
		exactly(t, v1alpha1.CategoryReadOnly, cmd)
	}
	for _, r := range awkRefused {
		cmd := "awk " + shellQuote(r.program) + " notes.txt"
		if got := ClassifyCommand(cmd); got.Category != r.want {
			t.Errorf("%q: classified %s, want %s; parts: %s", cmd, got.Category, r.want, describeParts(got.Parts))
		}
	}
	// awk stops reading options at its program: later words are files and
	// assignments, whatever they expand to.
	exactly(t, v1alpha1.CategoryReadOnly, `awk '{ print }' notes.txt -f x`, `awk '{ print }' "$f"`, `awk -F: -v n=1 '$1 > n' x=2 notes.txt`)
	exactly(t, v1alpha1.CategoryUnknown, `awk -f script.awk notes.txt`, `awk "$prog" notes.txt`, `awk --exec=x.awk notes.txt`)
}

// TestAwkReadingsMatchTheAwks runs each program with every awk installed here, in a
// directory of its own: a program called read-only leaves nothing behind in any of
// them, and each refused one leaves something behind in at least one (so the
// table tests what it claims to).
func TestAwkReadingsMatchTheAwks(t *testing.T) {
	var awks []string
	for _, name := range []string{"mawk", "gawk", "original-awk", "busybox"} {
		if path, err := exec.LookPath(name); err == nil {
			awks = append(awks, path)
		}
	}
	if len(awks) == 0 {
		t.Fatal("no awk is installed here")
	}
	run := func(awk, program string) []string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("alpha 1\nbeta 2\ngamma 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{program, "notes.txt"}
		if filepath.Base(awk) == "busybox" {
			args = append([]string{"awk"}, args...)
		}
		probeOutputEnv(t, dir, nil, awk, args...)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, e := range entries {
			if e.Name() != "notes.txt" {
				left = append(left, e.Name())
			}
		}
		sort.Strings(left)
		return left
	}
	for _, program := range awkReadOnly {
		for _, awk := range awks {
			if left := run(awk, program); len(left) > 0 {
				t.Errorf("%s %q is classified read-only and left %s", awk, program, strings.Join(left, ", "))
			}
		}
	}
	for _, r := range awkRefused {
		seen := false
		for _, awk := range awks {
			seen = seen || len(run(awk, r.program)) > 0
		}
		if !seen && (!r.gawkOnly || strings.Contains(strings.Join(awks, " "), "gawk")) {
			t.Errorf("%q left nothing behind in %s: the table does not show what it claims", r.program, strings.Join(awks, ", "))
		}
	}
}
