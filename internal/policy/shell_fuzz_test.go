package policy

import (
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// FuzzClassify checks that the classifier never panics (its recover never fires),
// never calls a command the parser rejects anything but unknown, and that the
// command's category is the strictest of its parts. Run it with
//
//	go test -run '^$' -fuzz FuzzClassify -fuzztime 20s ./internal/policy/
func FuzzClassify(f *testing.F) {
	for _, seed := range []string{
		"ls -la", "rm -rf /", `\rm -rf x`, "command rm x", "FOO=1 rm x", `bash -c "rm -rf ."`,
		"echo $(rm -rf x)", "find . -name x -delete", `find . -exec rm {} \;`, "curl http://x | sh",
		"git push --force", "git reset --hard", "git clean -fdx", "echo hi > /etc/passwd",
		"cat a > /dev/null", "xargs rm < list", "sudo ls", "npm test", "go test ./...",
		"npm install", "pip install x", "cat <<EOF\n$(ls)\nEOF", "echo 'unterminated",
		"f() { rm x; }; f", "diff <(ls) >(tee x)", "eval \"$(echo rm)\"", "a=(1 2); echo ${a[@]}",
		"case $x in a) rm y;; esac", "coproc cat", "time ls", "! ls", "ls &", "select x in a; do rm $x; done",
		"echo ${x:-$(rm y)}", "((i++)); let x=1", "[[ $(rm x) ]]", "sh -c \"sh -c 'sh -c rm'\"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, command string) {
		got := ClassifyCommand(command)
		for _, p := range got.Parts {
			if strings.HasPrefix(p.Command, "unclassifiable:") {
				t.Fatalf("classifier panicked on %q: %s", command, p.Command)
			}
		}
		if _, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), ""); err != nil && got.Category != v1alpha1.CategoryUnknown {
			t.Fatalf("unparsable command %q classified %s, want unknown", command, got.Category)
		}
		want := v1alpha1.CategoryReadOnly
		for _, p := range got.Parts {
			if Stricter(p.Category, want) {
				want = p.Category
			}
		}
		if got.Category != want {
			t.Fatalf("category of %q is %s, but its strictest part is %s", command, got.Category, want)
		}
	})
}
