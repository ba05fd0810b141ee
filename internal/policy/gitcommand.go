package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// gitReadOnly are subcommands that only read, whatever their arguments (except
// --output, checked separately).
var gitReadOnly = set("status", "log", "diff", "show", "blame", "annotate", "ls-files", "ls-tree",
	"rev-parse", "describe", "shortlog", "grep", "cat-file", "rev-list", "show-ref", "merge-base",
	"name-rev", "count-objects", "for-each-ref", "help", "version", "check-ignore",
	"var", "cherry", "show-branch", "diff-tree", "diff-files",
	"diff-index", "range-diff", "fsck", "check-attr", "check-ref-format")

// gitWrite are subcommands that change the repository or the working tree in ways
// that keep history recoverable.
var gitWrite = set("add", "stage", "commit", "merge", "rebase", "cherry-pick", "revert", "mv", "apply",
	"am", "init", "notes", "sparse-checkout", "bisect", "update-index", "read-tree", "commit-tree",
	"write-tree", "mktag", "mktree", "format-patch", "archive", "bundle", "prune", "repack",
	"maintenance", "rerere", "hash-object", "switch", "restore", "checkout", "symbolic-ref", "replace")

// gitNetwork are subcommands that talk to remotes.
var gitNetwork = set("fetch", "pull", "clone", "ls-remote", "remote-update", "send-email", "request-pull", "daemon", "instaweb")

// gitGlobal are git's options before the subcommand. -c, --config-env and
// --exec-path are missing on purpose: configuration and exec paths name programs
// git then runs (core.pager, core.fsmonitor, alias.*). -p (paginate) runs a pager.
var gitGlobal = &grammar{
	short: "C:hP",
	long: "git-dir= work-tree= namespace= no-pager bare no-replace-objects literal-pathspecs glob-pathspecs " +
		"noglob-pathspecs icase-pathspecs no-optional-locks",
	order: stopsAtOperand,
}

// git classifies a git command by its subcommand. Whatever the subcommand, a call
// that would be read-only is read-only only when its options are in the grammar of
// its form (gitReadGrammars). A word known only when it runs ("$rev") is accepted
// only by the read-only subcommands, and there only where the grammar proves it is
// no option: a value ("-n "$n""), after "--", or starting with text that is no
// option ("origin/$branch").
func git(c *classifier, w []word, _ int) {
	p := gitGlobal.parse(w[1:])
	if p.category == v1alpha1.CategoryReadOnly {
		if problem := gitBundledValue(gitGlobal, w[1:]); problem != "" {
			p.raise(v1alpha1.CategoryUnknown, problem)
		}
	}
	if p.category != v1alpha1.CategoryReadOnly {
		c.addWithReason(w, p.category, p.reason)
		return
	}
	if p.has("help", "h") && len(p.operands) > 0 {
		// git takes a leading -h as "help": git -h status is git help status.
		c.addWithReason(w, v1alpha1.CategoryUnknown, "git --help TOPIC (and -h TOPIC) runs man or the viewer its configuration names")
		return
	}
	if len(p.operands) == 0 || p.has("h", "help", "version") {
		c.add(w, v1alpha1.CategoryReadOnly) // prints usage or the version
		return
	}
	for i, a := range w[1:] {
		// Signature placeholders (%G?, %(signature)) and sort keys make git run gpg
		// (gpg.program) to check signatures.
		format := i > 0 && (w[i].text == "--format" || w[i].text == "--pretty" || w[i].text == "--sort")
		if strings.Contains(a.text, "%G") || strings.Contains(a.text, "%(signature") ||
			((format || strings.HasPrefix(a.text, "--sort=")) && strings.Contains(a.text, "signature")) {
			c.addWithReason(w, v1alpha1.CategoryUnknown, "a %G or signature format placeholder or sort key makes git run gpg.program to check signatures")
			return
		}
		if !a.static && format {
			c.addWithReason(w, v1alpha1.CategoryUnknown, "a format or sort key known only when it runs could make git run gpg.program")
			return
		}
	}
	subWord, rest := p.operands[0], p.operands[1:]
	if !subWord.static || subWord.split {
		c.addWithReason(w, v1alpha1.CategoryUnknown, subWord.text+" is known only when it runs, and could be any git subcommand or option")
		return
	}
	sub := subWord.text
	for _, a := range rest {
		if (!a.static || a.split) && !gitReadOnly[sub] {
			c.addWithReason(w, v1alpha1.CategoryUnknown, a.text+" is known only when it runs, and could be any git option")
			return
		}
	}
	category := gitSubcommand(sub, rest)
	if category != v1alpha1.CategoryReadOnly {
		reason := ""
		if sub == "config" && category == v1alpha1.CategoryUnknown {
			reason = gitConfigSets
		}
		c.addWithReason(w, category, reason)
		return
	}
	forms, problem := gitReadForms(sub, rest)
	if problem != "" {
		c.addWithReason(w, v1alpha1.CategoryUnknown, problem)
		return
	}
	read := parsedArgs{category: v1alpha1.CategoryReadOnly}
	for _, f := range forms {
		if f.g == nil {
			continue
		}
		sp := gitParse(f.g, f.args)
		if sp.category == v1alpha1.CategoryReadOnly && gitOwnBundles[f.key] {
			if problem := gitBundledValue(f.g, f.args); problem != "" {
				sp.raise(v1alpha1.CategoryUnknown, problem)
			}
		}
		if sp.has("help") {
			sp.raise(v1alpha1.CategoryUnknown, "git "+f.key+" --help runs man or the viewer its configuration names")
		}
		read.raise(sp.category, sp.reason)
	}
	c.addWithReason(w, read.category, read.reason)
}

// gitForm is one grammar of a git command and the words it reads.
type gitForm struct {
	key  string
	g    *grammar
	args []word
}

// gitReadForms finds the grammars a read-only git SUB REST is checked against. The
// subcommands whose action word picks the options (stash list, remote show) have one
// grammar for the options before the action, when they take any, and one for the
// words after it; the others have one. An array, not a slice: nothing to allocate.
func gitReadForms(sub string, rest []word) ([2]gitForm, string) {
	var forms [2]gitForm
	switch sub {
	case "stash", "remote", "worktree", "submodule":
		i := 0
		for i < len(rest) && rest[i].static && strings.HasPrefix(rest[i].text, "-") && rest[i].text != "--" {
			i++
		}
		if g, ok := gitReadGrammars[sub]; ok {
			forms[0] = gitForm{key: sub, g: g, args: rest[:i]}
		} else if i > 0 {
			return forms, fmt.Sprintf("toolgate has no grammar for options of git %s before its action", sub)
		}
		if i == len(rest) {
			return forms, ""
		}
		key := sub + " " + rest[i].text
		if g, ok := gitReadGrammars[key]; ok {
			forms[1] = gitForm{key: key, g: g, args: rest[i+1:]}
			return forms, ""
		}
		if sub == "submodule" {
			// Its actions take the same options.
			forms[0].args = rest
			return forms, ""
		}
		return forms, fmt.Sprintf("toolgate has no grammar for git %s", key)
	}
	g, ok := gitReadGrammars[sub]
	if !ok {
		return forms, fmt.Sprintf("toolgate has no grammar for git %s", sub)
	}
	forms[0] = gitForm{key: sub, g: g, args: rest}
	return forms, ""
}

// gitSubcommand is the category of git SUB REST: of the subcommands whose options
// and operands decide whether they only read (gitGrammarCategory), of those whose
// first operand names an action (gitActionCategory), and of the others, which are
// told by their flags, as git takes them.
func gitSubcommand(sub string, rest []word) v1alpha1.CommandCategory {
	ops := operands(rest)
	first := ""
	if len(ops) > 0 {
		first = ops[0].text
	}
	switch {
	case gitReadOnly[sub]:
		// Their options are checked by gitReadGrammars.
		return v1alpha1.CategoryReadOnly
	case sub == "clean" || sub == "branch" || sub == "tag" || sub == "config":
		return gitGrammarCategory(sub, rest)
	case sub == "stash" || sub == "remote" || sub == "reflog" || sub == "worktree" || sub == "submodule":
		return gitActionCategory(sub, first, rest)
	case sub == "push":
		for _, o := range ops {
			if strings.HasPrefix(o.text, "+") || strings.HasPrefix(o.text, ":") {
				return v1alpha1.CategoryVCSDestructive // forced or deleting refspec
			}
		}
		if hasGitFlag(rest, "fd", "force", "force-with-lease", "force-if-includes", "mirror", "delete", "prune") {
			return v1alpha1.CategoryVCSDestructive
		}
		return v1alpha1.CategoryNetwork
	case sub == "reset":
		if hasGitFlag(rest, "", "hard", "merge", "keep") {
			return v1alpha1.CategoryVCSDestructive
		}
		return v1alpha1.CategoryWrite
	case sub == "checkout":
		// checkout -f, -B, "--" paths and "." throw away uncommitted work. A bare
		// operand may be a branch or a file; it is treated as a branch switch.
		if hasGitFlag(rest, "fBp", "force", "patch") || hasWord(rest, "--") || first == "." {
			return v1alpha1.CategoryVCSDestructive
		}
		return v1alpha1.CategoryWrite
	case sub == "switch":
		if hasGitFlag(rest, "fC", "force", "discard-changes", "force-create") {
			return v1alpha1.CategoryVCSDestructive
		}
		return v1alpha1.CategoryWrite
	case sub == "restore":
		// restore without --staged (or with --worktree) discards working-tree changes.
		if hasGitFlag(rest, "S", "staged") && !hasGitFlag(rest, "W", "worktree") {
			return v1alpha1.CategoryWrite
		}
		return v1alpha1.CategoryVCSDestructive
	case sub == "gc":
		if hasGitFlag(rest, "", "prune") {
			return v1alpha1.CategoryVCSDestructive
		}
		return v1alpha1.CategoryWrite
	case sub == "update-ref":
		if hasGitFlag(rest, "d") {
			return v1alpha1.CategoryVCSDestructive
		}
		return v1alpha1.CategoryWrite
	case sub == "filter-branch" || sub == "filter-repo":
		return v1alpha1.CategoryVCSDestructive
	case sub == "rm":
		if hasGitFlag(rest, "", "cached") {
			return v1alpha1.CategoryWrite
		}
		return v1alpha1.CategoryDelete
	case gitWrite[sub]:
		return v1alpha1.CategoryWrite
	case gitNetwork[sub]:
		return v1alpha1.CategoryNetwork
	}
	// Anything else may be an alias, which can run any program.
	return v1alpha1.CategoryUnknown
}

// gitGrammarCategory is the category of the git subcommands that only read with
// some options or operands (branch and tag list, config get, clean -n) and change
// something with others. They are read from the subcommand's grammar, which knows
// the options that take a value: in git branch --format -l NAME, "-l" is --format's
// value, and NAME makes a branch.
func gitGrammarCategory(sub string, rest []word) v1alpha1.CommandCategory {
	// read is rest as the read-only grammar of sub parses it; readable says every
	// word fitted it.
	var read parsedArgs
	readable := false
	if g, ok := gitReadGrammars[sub]; ok {
		read = gitParse(g, rest)
		readable = read.category == v1alpha1.CategoryReadOnly
	}
	switch sub {
	case "clean":
		if readable && read.has("n", "dry-run") {
			return v1alpha1.CategoryReadOnly
		}
		return v1alpha1.CategoryVCSDestructive
	case "branch":
		switch {
		case hasGitFlag(rest, "DMC") || (hasGitFlag(rest, "d", "delete") && hasGitFlag(rest, "f", "force")):
			return v1alpha1.CategoryVCSDestructive
		case hasGitFlag(rest, "dmcu", "delete", "move", "copy", "set-upstream-to", "unset-upstream", "edit-description", "track"):
			return v1alpha1.CategoryWrite
		case readable && len(read.operands) > 0 && !read.has("l", "a", "r", "list", "all", "remotes", "contains", "no-contains", "merged", "no-merged", "points-at"):
			return v1alpha1.CategoryWrite // creates a branch
		}
		// A list, or words the grammar refuses: git's check of the grammar says why.
		return v1alpha1.CategoryReadOnly
	case "tag":
		switch {
		case hasGitFlag(rest, "df", "delete", "force"):
			return v1alpha1.CategoryVCSDestructive
		case readable && len(read.operands) > 0 && !read.has("l", "n", "list", "contains", "no-contains", "merged", "no-merged", "points-at"):
			return v1alpha1.CategoryWrite // creates a tag
		}
		// A list, or words the grammar refuses (-v runs gpg): git's check of the
		// grammar says why.
		return v1alpha1.CategoryReadOnly
	}
	// config
	if readable && gitConfigReads(read) {
		return v1alpha1.CategoryReadOnly
	}
	// Setting configuration can make later read-only commands run programs
	// (core.fsmonitor runs on git status), so it is not a plain write.
	return v1alpha1.CategoryUnknown
}

// gitActionCategory is the category of the git subcommands whose first operand
// names an action (git stash drop, git worktree remove; git remote show, which asks
// the remote unless -n says not to); first is that operand.
func gitActionCategory(sub, first string, rest []word) v1alpha1.CommandCategory {
	switch sub {
	case "stash":
		// Only the word right after stash names its action: anything else (an
		// option, --, a path) is stash push.
		if len(rest) > 0 {
			first = rest[0].text
		}
		switch first {
		case "list", "show":
			return v1alpha1.CategoryReadOnly
		case "drop", "clear":
			return v1alpha1.CategoryVCSDestructive
		}
		return v1alpha1.CategoryWrite
	case "remote":
		switch first {
		case "", "get-url":
			return v1alpha1.CategoryReadOnly
		case "show":
			// show asks the remote unless -n says not to.
			if forms, problem := gitReadForms(sub, rest); problem == "" && forms[1].g != nil {
				show := forms[1]
				if sp := gitParse(show.g, show.args); sp.category == v1alpha1.CategoryReadOnly && !sp.has("n") {
					return v1alpha1.CategoryNetwork
				}
			}
			return v1alpha1.CategoryReadOnly // the grammar check refuses what it does not know
		case "update", "prune":
			return v1alpha1.CategoryNetwork
		}
		return v1alpha1.CategoryWrite
	case "reflog":
		switch first {
		case "expire", "delete", "drop":
			return v1alpha1.CategoryVCSDestructive
		}
		// git reflog [show] [options] [REF] and git reflog exists REF read; any
		// other first word may be an action of a later git.
		if len(rest) == 0 || strings.HasPrefix(rest[0].text, "-") || rest[0].text == "show" || rest[0].text == "exists" {
			return v1alpha1.CategoryReadOnly
		}
		return v1alpha1.CategoryUnknown
	case "worktree":
		switch first {
		case "list":
			return v1alpha1.CategoryReadOnly
		case "remove":
			return v1alpha1.CategoryDelete
		}
		return v1alpha1.CategoryWrite
	}
	// submodule
	switch first {
	case "", "status", "summary":
		return v1alpha1.CategoryReadOnly
	case "foreach":
		return v1alpha1.CategoryUnknown
	}
	return v1alpha1.CategoryNetwork
}
