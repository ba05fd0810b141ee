package policy

import (
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Where bash and the parser (mvdan.cc/sh) read the same text differently. Each command
// below was run with GNU bash 5.2 in a throwaway directory and ran `touch pwned` (or
// passed uniq a second operand, which uniq then truncated), while the parser's reading
// showed no such command.

// Inside a double-quoted ${x:-word} (and -, +, :+, =, :=), bash takes single quotes
// and $' as literal characters and expands what they hold: the $( ) or backquotes run.
// The parser reads them as quotes, so it sees text where bash runs a command. The same
// holds in an unquoted here-document's body. $'...' is decoded first, so
// $'\x24(touch pwned)' runs too.
func TestSingleQuotesInADoubleQuotedExpansionAreUnknown(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		`echo "${x:-'$(touch pwned)'}"`,
		`echo "${x-'$(touch pwned)'}"`,
		`x=1; echo "${x:+'$(touch pwned)'}"`,
		`x=1; echo "${x+'$(touch pwned)'}"`,
		`echo "${x:='$(touch pwned)'}"`,
		`echo "${x='$(touch pwned)'}"`,
		"echo \"${x:-'`touch pwned`'}\"",
		"echo \"${x:-$'`touch pwned`'}\"",
		`echo "${x:-$'\x24(touch pwned)'}"`,
		`echo "${x:-${y:-'$(touch pwned)'}}"`,
		`echo $"${x:-'$(touch pwned)'}"`,
		`v="${x:-'$(touch pwned)'}"`,
		`case "${x:-'$(touch pwned)'}" in *) ;; esac`,
		`[[ "${x:-'$(touch pwned)'}" ]]`,
		"cat <<EOF\n${x:-'$(touch pwned)'}\nEOF",
		"cat <<EOF\n$(echo \"${x:-'$(touch pwned)'}\")\nEOF",
		`sh -c "echo \"\${x:-'\$(touch pwned)'}\""`,
	)
	// Where both read the quotes alike, or nothing is expanded, it stays read-only:
	// unquoted, the quotes are quotes to bash too; a quoted here-document is text; a
	// single-quoted word with nothing to expand is literal text for both.
	exactly(t, v1alpha1.CategoryReadOnly,
		`echo ${x:-'$(touch pwned)'}`,
		`echo "${x:-default}"`,
		`echo "${x:-'plain words'}"`,
		`echo "${x:-"$(pwd)"}"`,
		"cat <<'EOF'\n${x:-'$(touch pwned)'}\nEOF",
	)
	if why := reasons(ClassifyCommand(`echo "${x:-'$(touch pwned)'}"`)); !strings.Contains(why, "single quotes") {
		t.Errorf("the refusal does not say why: %s", why)
	}
}

// Found by the differential test: inside a ${...} expansion's word bash runs a process
// substitution the parser reads as the text "<(cmd)", and decodes $'...' and expands
// the result inside double quotes, or inside a command substitution inside double
// quotes even where the expansion itself is unquoted. Each ran touch pwned.
func TestProcessSubstitutionsAndDollarQuotesInExpansionsAreUnknown(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		`echo ${x:-<(touch pwned)}`,
		`echo ${x:->(touch pwned)}`,
		`x=1; echo "${x,<(touch pwned)}"`,
		`x=1; echo ${x#>(touch pwned)}`,
		`echo "$(: ${x-$'\x24(touch pwned)'})"`,
		`echo "$(: ${x-$'$(touch pwned)'})"`,
		`v="$(echo ${x-$'\x60touch pwned\x60'})"`,
		`echo "$( (: ${x-$'\x24(touch pwned)'}) )"`,
	)
	// Plain text in $'...', and a process substitution outside an expansion (which
	// the parser sees), stay what they were.
	exactly(t, v1alpha1.CategoryReadOnly,
		`echo "${x:-$'plain'}"`,
		`diff <(ls) <(ls src)`,
		`echo "${x:-a(b)}"`,
	)
	if why := reasons(ClassifyCommand(`echo ${x:-<(touch pwned)}`)); !strings.Contains(why, "process substitution") {
		t.Errorf("the refusal does not say why: %s", why)
	}
}

// A backslash at the end of a comment: bash ends the comment at the newline and runs
// the next line; the parser joins the lines and reads the next line as more words of
// the command before the comment (echo a touch pwned). Where the joined reading
// happens to show the same commands (a pipe, an array, a case item), the comment is
// refused all the same: the rule is about the text, not about what follows.
func TestCommentsEndingInABackslashAreUnknown(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		"echo a # c \\\ntouch pwned",
		"ls # \\\nrm -rf .",
		"cat notes.txt |# \\\ntee pwned",
		"echo $(echo a # \\\ntouch pwned\n)",
		"a=(x # \\\n) ; touch pwned",
		"case a in a) echo # \\\n;; esac; touch pwned",
		"sh -c 'echo a # \\\ntouch pwned'",
	)
	if why := reasons(ClassifyCommand("echo a # c \\\ntouch pwned")); !strings.Contains(why, "backslash") {
		t.Errorf("the refusal does not say why: %s", why)
	}
	// Two backslashes are one escaped backslash to the parser as well, and a comment
	// without one ends at the newline for both.
	exactly(t, v1alpha1.CategoryReadOnly,
		"echo a # c \\\\\nls",
		"echo a # c\nls",
		"# a comment \\",
	)
}

// "${!prefix@}", "$@", "${a[@]}", "${@:2}" and their kind expand to as many words as
// there are names or elements, also inside another expansion's word
// ("${x:-"$@"}"), and a prefix before them ("./") only starts the first word. An
// operand counter that takes one of them for one word lets a second operand through:
// uniq -- "${!x@}" with x1 and x2 set is uniq x1 x2, which writes x2.
func TestMultiWordExpansionsAreNotCountedAsOneOperand(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		`x1=notes.txt x2=owned.txt; uniq -- "${!x@}"`,
		`uniq ./"${!x@}"`,
		`uniq -- "${x:-"$@"}"`,
		`uniq -- "${x:-$@}"`,
		`a=(notes.txt owned.txt); uniq -- "${x+"${a[@]}"}"`,
		`uniq -- "${@:2}"`,
		`uniq -- "${!a[@]}"`,
		`uniq -- "${a[@]:0:2}"`,
		`uniq -- "${a[@]@Q}"`,
	)
	// One word stays one: "$*", "${a[*]}", "${!x*}" and a plain "$x" join into one
	// word, and commands whose every option only reads take any word.
	exactly(t, v1alpha1.CategoryReadOnly,
		`uniq -- "$*"`,
		`uniq -- "${a[*]}"`,
		`uniq -- "${!x*}"`,
		`uniq -- "$x"`,
		`uniq -- "${x:-notes.txt}"`,
		`cat "${!x@}" "$@"`,
	)
	for _, tt := range []struct {
		src     string
		several bool
	}{
		{`"$@"`, true}, {`"${@}"`, true}, {`"${@:2}"`, true}, {`"${a[@]}"`, true}, {`"${!a[@]}"`, true},
		{`"${!x@}"`, true}, {`"${x:-"$@"}"`, true}, {`"${x:-${a[@]}}"`, true}, {`"${!x}"`, true},
		{`"$*"`, false}, {`"${a[*]}"`, false}, {`"${!x*}"`, false}, {`"$x"`, false}, {`"${x:-a b}"`, false},
		{`"$(ls "$@")"`, false}, {`"$((1+2))"`, false}, {`"${#a[@]}"`, false},
	} {
		w := parseWord(t, tt.src)
		if w.split != tt.several {
			t.Errorf("%s: split %v, want %v", tt.src, w.split, tt.several)
		}
	}
}

// parseWord is the word of a one-word command.
func parseWord(t *testing.T, src string) word {
	t.Helper()
	words := parseWords(t, src)
	if len(words) != 1 {
		t.Fatalf("%s is %d words", src, len(words))
	}
	return words[0]
}

// parseWords is the words of the first simple command of src, as the classifier
// reads them.
func parseWords(t testing.TB, src string) []word {
	t.Helper()
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	var words []word
	syntax.Walk(file, func(n syntax.Node) bool {
		if call, ok := n.(*syntax.CallExpr); ok && words == nil && len(call.Args) > 0 {
			for _, a := range call.Args {
				words = append(words, wordOf(a))
			}
		}
		return words == nil
	})
	return words
}

// reasons joins the reasons of a classification's parts.
func reasons(c Classification) string {
	var out []string
	for _, p := range c.Parts {
		if p.Reason != "" {
			out = append(out, p.Command+": "+p.Reason)
		}
	}
	return strings.Join(out, "; ")
}

// A $ followed by a backslash and a newline: bash removes the pair and expands what
// follows on the next line ($( ), ${ }, $@), the parser reads a literal $ (found by
// the differential test). The first ran touch pwned; the uniq wrote owned.txt.
func TestDollarBeforeALineContinuationIsUnknown(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		"echo \"$\\\n(touch pwned)\"",
		"echo \"${x:-$\\\n(touch pwned)}\"",
		"cat <<EOF\n$\\\n(touch pwned)\nEOF",
		"[[ -n \"$\\\n(touch pwned)\" ]]",
		"a=(x \"$\\\n(touch pwned)\")",
		"set -- notes.txt owned.txt; uniq -- \"$\\\n@\"",
		"bash -c 'echo \"$\\\n(touch pwned)\"'",
	)
	exactly(t, v1alpha1.CategoryReadOnly, "echo a \\\nb", "echo \"a \\\nb $x\"")
	if why := reasons(ClassifyCommand("echo \"$\\\n(touch pwned)\"")); !strings.Contains(why, "joins the lines") {
		t.Errorf("the refusal does not say why: %s", why)
	}
}
