package policy

import (
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Bypasses of the classifier found by attacking it: each command was run for real (in
// a throwaway directory, with GNU bash 5.2, git 2.39, GNU tar 1.34, pip 23) and does
// what its comment says, while the classifier once called it something less
// dangerous. Each must stay at least as strict as the category given.

// atLeast fails for every command classified less strictly than want.
func atLeast(t *testing.T, want v1alpha1.CommandCategory, commands ...string) {
	t.Helper()
	for _, cmd := range commands {
		if got := ClassifyCommand(cmd); Stricter(want, got.Category) {
			t.Errorf("%q: classified %s, want at least %s; parts: %s", cmd, got.Category, want, describeParts(got.Parts))
		}
	}
}

// exactly fails for every command not classified want.
func exactly(t *testing.T, want v1alpha1.CommandCategory, commands ...string) {
	t.Helper()
	for _, cmd := range commands {
		if got := ClassifyCommand(cmd); got.Category != want {
			t.Errorf("%q: classified %s, want %s; parts: %s", cmd, got.Category, want, describeParts(got.Parts))
		}
	}
}

// bash joins backslash-newline in an unquoted here-document's body before it compares
// a line with the delimiter, so "EO\" and "F" end the body there and the next line
// runs as a command; the parser does not join them and reads it as data. Inside $( )
// or <( ), bash ends the body at "EOF)" together with the substitution, where the
// parser reads on to a plain "EOF". Both ran `touch pwned`.
func TestHeredocsWhoseEndBashFindsElsewhereAreUnknown(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		"cat <<EOF\nx\nEO\\\nF\ntouch pwned\nEOF",
		"cat <<EOF\nx\nE\\\nO\\\nF\ntouch pwned\nEOF",
		"cat <<-EOF\n\tx\n\tEO\\\nF\ntouch pwned\nEOF",
		"echo $(cat <<EOF\nx\nEOF)\ntouch pwned\nEOF\n)",
		"cat <(cat <<EOF\nx\nEOF)\ntouch pwned\nEOF\n)",
		"echo `cat <<EOF\nx\nEOF`\ntouch pwned\nEOF\n`",
	)
	// What bash and the parser read alike stays read-only: a quoted delimiter keeps
	// backslashes as they are, and <<- strips the tabs of the last line.
	exactly(t, v1alpha1.CategoryReadOnly,
		"cat <<'EOF'\nline \\\nmore\nEOF",
		"cat <<-EOF\n\tx\n\tEOF",
		"cat <<EOF\nhello $USER\nEOF",
		"cat <<\"END\"\nEOF)\nEND",
	)
}

// git's read-only forms are told from its subcommand's grammar, which knows the
// options that take a value: "list" and "-l" below are --file's, --format's and
// --sort's values, not the list action, and git wrote the config files ./list, ./-l
// and ./--get (with core.fsmonitor, a program later read-only git commands run) and
// created the branch or tag "owned"; in clean -en the n is -e's exclude pattern, not
// a dry run, and with clean.requireForce=false it deleted every untracked file.
func TestGitOptionValuesAreNotActions(t *testing.T) {
	atLeast(t, v1alpha1.CategoryUnknown,
		"git config --file list core.fsmonitor 'touch pwned'",
		"git config --file -l core.fsmonitor 'touch pwned'",
		"git config --file --get core.fsmonitor 'touch pwned'",
		"git tag -v v1", // runs gpg.program
		"git branch --frobnicate x",
	)
	atLeast(t, v1alpha1.CategoryWrite,
		"git branch --format -l owned",
		"git branch --sort -l owned",
		"git tag --format -l owned",
	)
	atLeast(t, v1alpha1.CategoryVCSDestructive, "git clean -en", "git clean -xde -n")
	exactly(t, v1alpha1.CategoryReadOnly,
		"git config --get user.name", "git config --file cfg --get user.name", "git config -l",
		"git branch --list", "git branch --format='%(refname)' -l", "git tag -l 'v*'",
		"git clean -n", "git clean -xdn", "git remote show -n origin",
	)
}

// git's parse-options takes any unambiguous prefix of a long option: --har is --hard,
// --mir --mirror, --del --delete, --forc --force, --pru --prune. reset --har
// discarded a change and push --del deleted the remote branch.
func TestGitLongOptionPrefixesAreTheOptions(t *testing.T) {
	atLeast(t, v1alpha1.CategoryVCSDestructive,
		"git reset --har HEAD~3",
		"git push --mir origin",
		"git push --del origin main",
		"git tag --del v1",
		"git branch -d --forc x",
		"git gc --pru=now",
		"git checkout --forc main",
	)
}
