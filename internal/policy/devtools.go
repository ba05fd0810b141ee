package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// This file classifies version control, language toolchains and package managers by
// subcommand. Each function gets static words only (see sensitive).

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

// gitSubcommand is the category of git SUB REST. Where a form is read-only only with
// some options or operands (branch and tag list, config get, clean -n, remote show -n),
// they are read from the subcommand's grammar, which knows the options that take a
// value: in git branch --format -l NAME, "-l" is --format's value, and NAME makes a
// branch. Everything else is told by its flags, as git takes them.
func gitSubcommand(sub string, rest []word) v1alpha1.CommandCategory {
	ops := operands(rest)
	first := ""
	if len(ops) > 0 {
		first = ops[0].text
	}
	// read is rest as the read-only grammar of sub parses it; readable says every
	// word fitted it.
	var read parsedArgs
	readable := false
	if g, ok := gitReadGrammars[sub]; ok {
		read = gitParse(g, rest)
		readable = read.category == v1alpha1.CategoryReadOnly
	}
	switch {
	case gitReadOnly[sub]:
		// Their options are checked by gitReadGrammars.
		return v1alpha1.CategoryReadOnly
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
	case sub == "clean":
		if readable && read.has("n", "dry-run") {
			return v1alpha1.CategoryReadOnly
		}
		return v1alpha1.CategoryVCSDestructive
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
	case sub == "branch":
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
	case sub == "tag":
		switch {
		case hasGitFlag(rest, "df", "delete", "force"):
			return v1alpha1.CategoryVCSDestructive
		case readable && len(read.operands) > 0 && !read.has("l", "n", "list", "contains", "no-contains", "merged", "no-merged", "points-at"):
			return v1alpha1.CategoryWrite // creates a tag
		}
		// A list, or words the grammar refuses (-v runs gpg): git's check of the
		// grammar says why.
		return v1alpha1.CategoryReadOnly
	case sub == "stash":
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
	case sub == "remote":
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
	case sub == "config":
		if readable && gitConfigReads(read) {
			return v1alpha1.CategoryReadOnly
		}
		// Setting configuration can make later read-only commands run programs
		// (core.fsmonitor runs on git status), so it is not a plain write.
		return v1alpha1.CategoryUnknown
	case sub == "reflog":
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
	case sub == "worktree":
		switch first {
		case "list":
			return v1alpha1.CategoryReadOnly
		case "remove":
			return v1alpha1.CategoryDelete
		}
		return v1alpha1.CategoryWrite
	case sub == "submodule":
		switch first {
		case "", "status", "summary":
			return v1alpha1.CategoryReadOnly
		case "foreach":
			return v1alpha1.CategoryUnknown
		}
		return v1alpha1.CategoryNetwork
	case gitWrite[sub]:
		return v1alpha1.CategoryWrite
	case gitNetwork[sub]:
		return v1alpha1.CategoryNetwork
	}
	// Anything else may be an alias, which can run any program.
	return v1alpha1.CategoryUnknown
}

// goCmd classifies the go command by subcommand.
func goCmd(c *classifier, w []word, _ int) {
	ops := operands(w[1:])
	if len(ops) == 0 {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	sub, rest := ops[0].text, ops[1:]
	for _, a := range w[2:] {
		// -exec, -toolexec and -vettool run the program they name; go test reads
		// flags after its packages too.
		name, _, _ := strings.Cut(strings.TrimLeft(a.text, "-"), "=")
		if strings.HasPrefix(a.text, "-") && (name == "exec" || name == "toolexec" || name == "vettool") {
			c.addWithReason(w, v1alpha1.CategoryUnknown, fmt.Sprintf("go %s %s runs the program it names", sub, a.text))
			return
		}
	}
	var category v1alpha1.CommandCategory
	switch sub {
	case "test", "vet":
		category = v1alpha1.CategoryTest
	case "build", "run", "generate", "tool":
		category = v1alpha1.CategoryBuild
	case "install", "get":
		category = v1alpha1.CategoryInstall
	case "fmt", "work", "fix":
		category = v1alpha1.CategoryWrite
	case "clean":
		category = v1alpha1.CategoryDelete
	case "version", "list", "doc", "help", "bug":
		category = v1alpha1.CategoryReadOnly
		if sub == "list" {
			// The subcommand is w[1] (devTool). A form go list is not known to be
			// read-only in is unknown, before whether it fetches.
			if why := goListFetches(w[2:]); why != "" {
				if problem := devFormProblem(goReadOnly, w); problem != "" {
					c.addWithReason(w, v1alpha1.CategoryUnknown, problem)
				} else {
					c.addWithReason(w, v1alpha1.CategoryNetwork, why)
				}
				return
			}
		}
	case "env":
		category = v1alpha1.CategoryReadOnly
		if hasFlag(w[1:], "wu") {
			// Like git config: what it sets (CC, GOFLAGS=-toolexec=...) runs programs
			// in later go commands, read-only ones included.
			c.addWithReason(w, v1alpha1.CategoryUnknown, "go env -w and -u change the go command's configuration, which can make later go commands run programs")
			return
		}
	case "mod":
		category = v1alpha1.CategoryUnknown
		if len(rest) > 0 {
			switch rest[0].text {
			case "download", "tidy", "vendor":
				category = v1alpha1.CategoryInstall
			case "graph", "why", "verify":
				// They download the modules they need.
				category = v1alpha1.CategoryNetwork
			case "init", "edit":
				category = v1alpha1.CategoryWrite
			}
		}
	default:
		category = v1alpha1.CategoryUnknown
	}
	c.add(w, category)
}

// goListFetches says why go list would download modules, or "": a MODULE@QUERY
// operand is resolved against the module proxy, and -m all and -deps load the whole
// module graph, fetching what the module cache lacks (as go mod graph does).
func goListFetches(args []word) string {
	modules, all := false, false
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a.text, "-"), "=")
		switch {
		case strings.Contains(a.text, "@"):
			return "go list resolves a module@version query against the module proxy"
		case strings.HasPrefix(a.text, "-") && name == "deps":
			return "go list -deps loads every dependency, downloading those the module cache lacks"
		case strings.HasPrefix(a.text, "-") && name == "m":
			modules = true
		case a.text == "all":
			all = true
		}
	}
	if modules && all {
		return "go list -m all loads the whole module graph, downloading what the module cache lacks"
	}
	return ""
}

// nodeTool is what toolgate knows of one JavaScript package manager. Each has
// tables of its own, read from the tool itself (npm 11.19, yarn 1.22 and 4.18,
// pnpm 9.15 and 10, bun 1.4: their command lists, and each candidate name run in a
// project whose package.json has a script of that name).
type nodeTool struct {
	// commands are its built-in commands and their aliases, of every version
	// named above: a name built in to any of them is not taken for a script.
	commands map[string]bool
	// scriptsByName says a name that is not a built-in command runs the
	// package.json script of that name (or a program of node_modules/.bin, or a
	// file): yarn lint, pnpm ls, bun root.
	scriptsByName bool
	// bare is what the tool does with no subcommand: yarn and bun install.
	bare v1alpha1.CommandCategory
	// readOnly are the forms of its built-in commands that only read.
	readOnly map[string]devForm
	// adds declares what every command of the tool does besides (projectCode).
	adds adds
}

// nodeTools are the JavaScript package managers.
var nodeTools = map[string]nodeTool{
	// npm runs no script for a name it does not know (Unknown command); it takes an
	// unambiguous prefix of a command (npm inst is install), which is unknown here.
	"npm": {
		commands: set("access", "adduser", "approve-scripts", "audit", "bugs", "cache", "ci", "completion", "config", "dedupe",
			"deny-scripts", "deprecate", "diff", "dist-tag", "docs", "doctor", "edit", "exec", "explain", "explore", "find-dupes",
			"fund", "get", "help", "help-search", "init", "install", "install-ci-test", "install-scripts", "install-test", "link",
			"ll", "login", "logout", "ls", "org", "outdated", "owner", "pack", "ping", "pkg", "prefix", "profile", "prune",
			"publish", "query", "rebuild", "repo", "restart", "root", "run", "sbom", "search", "set", "shrinkwrap", "stage",
			"star", "stars", "start", "stop", "team", "test", "token", "trust", "undeprecate", "uninstall", "unpublish",
			"unstar", "update", "version", "view", "whoami",
			// aliases, npm's own misspellings included
			"author", "home", "issues", "info", "show", "find", "add", "unlink", "remove", "rm", "r", "un", "rb", "list", "ln",
			"create", "i", "it", "cit", "u", "up", "c", "s", "se", "tst", "t", "ddp", "v", "run-script", "clean-install",
			"clean-install-test", "x", "why", "la", "verison", "ic", //nolint:misspell // npm's alias of version "innit", "in", "ins", "inst", "insta", "instal", "isnt",
			"isnta", "isntal", "isntall", "install-clean", "isntall-clean", "hlep", "dist-tags", "upgrade", "udpate", "rum",
			"sit", "urn", "ogr", "add-user"),
		bare:     v1alpha1.CategoryReadOnly,
		readOnly: npmReadOnly,
		adds:     addsNothing,
	},
	// yarn 1 and yarn 2+ have different commands (yarn list is a command of yarn 1
	// and a script for yarn 4); both run the release yarnPath (.yarnrc.yml) or
	// yarn-path (.yarnrc) names for every command, --version included.
	"yarn": {
		commands: set("access", "add", "audit", "autoclean", "bin", "cache", "check", "config", "constraints", "create", "dedupe",
			"dlx", "exec", "explain", "generate-lock-entry", "global", "help", "import", "info", "init", "install", "licenses",
			"link", "list", "login", "logout", "node", "npm", "outdated", "owner", "pack", "patch", "patch-commit", "plugin",
			"policies", "publish", "rebuild", "remove", "run", "search", "set", "stage", "tag", "team", "test", "unlink",
			"unplug", "up", "upgrade", "upgrade-interactive", "version", "versions", "why", "workspace", "workspaces"),
		scriptsByName: true,
		bare:          v1alpha1.CategoryInstall,
		readOnly:      yarnReadOnly,
		adds:          adds{projectCode: "yarn first runs the release that yarnPath in the project's .yarnrc.yml (yarn-path in .yarnrc) names, a file of the workspace, for every command"},
	},
	// pnpm loads the project's .pnpmfile.cjs for every command, --version included.
	"pnpm": {
		commands: set("add", "dedupe", "fetch", "import", "i", "install", "it", "install-test", "ln", "link", "prune", "rb",
			"rebuild", "rm", "remove", "uninstall", "un", "unlink", "up", "update", "upgrade", "patch", "patch-commit",
			"patch-remove", "audit", "licenses", "ls", "list", "ll", "la", "outdated", "why", "approve-builds", "create", "dlx",
			"exec", "ignored-builds", "run", "run-script", "start", "t", "test", "tst", "bin", "c", "config", "get", "set",
			"deploy", "doctor", "init", "pack", "publish", "root", "self-update", "env", "cat-file", "cat-index", "find-hash",
			"store", "cache", "server", "setup", "recursive", "multi", "m", "help", "install-completion", "completion",
			// passed on to npm
			"access", "adduser", "bugs", "deprecate", "dist-tag", "docs", "edit", "info", "login", "logout", "owner", "ping",
			"prefix", "profile", "pkg", "repo", "s", "search", "set-script", "show", "star", "stars", "team", "token",
			"unpublish", "unstar", "v", "version", "view", "whoami", "xmas"),
		scriptsByName: true,
		bare:          v1alpha1.CategoryReadOnly,
		readOnly:      pnpmReadOnly,
		adds:          adds{projectCode: "pnpm first loads the project's .pnpmfile.cjs (or the pnpmfile its .npmrc names), a file of the workspace, for every command"},
	},
	"bun": {
		commands: set("run", "test", "check", "fmt", "x", "repl", "exec", "install", "i", "add", "a", "remove", "rm", "update",
			"audit", "dedupe", "prune", "outdated", "link", "unlink", "publish", "patch", "patch-commit", "pm", "info", "why",
			"build", "init", "create", "c", "upgrade", "list", "help", "completions", "discord", "getcompletes", "feedback"),
		scriptsByName: true,
		bare:          v1alpha1.CategoryInstall,
		readOnly:      bunReadOnly,
		adds:          addsNothing,
	},
}

// nodePackageManager classifies npm, pnpm, yarn and bun, each by its own tables.
func nodePackageManager(c *classifier, w []word, _ int) {
	tool := nodeTools[w[0].text]
	if hasFlag(w[1:], "v", "version") {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	ops := operands(w[1:])
	if len(ops) == 0 {
		c.add(w, tool.bare)
		return
	}
	sub := ops[0].text
	script := ""
	if len(ops) > 1 {
		script = ops[1].text
	}
	if tool.scriptsByName && !tool.commands[sub] {
		c.addWithReason(w, scriptCategory(sub), fmt.Sprintf("%s %s runs the package script (or the node_modules/.bin program) named %s: it is not a command of %s", w[0].text, sub, sub, w[0].text))
		return
	}
	var category v1alpha1.CommandCategory
	switch sub {
	case "test", "t", "tst":
		category = v1alpha1.CategoryTest
	case "run", "run-script":
		category = scriptCategory(script)
	case "start", "stop", "restart":
		category = scriptCategory(sub)
	case "build":
		category = v1alpha1.CategoryBuild
	case "install", "i", "ci", "add", "remove", "rm", "uninstall", "un", "update", "up", "upgrade",
		"exec", "x", "dlx", "create", "init", "link", "rebuild", "dedupe", "prune":
		category = v1alpha1.CategoryInstall
		if w[0].text == "bun" && sub == "exec" {
			c.addWithReason(w, v1alpha1.CategoryUnknown, "bun exec runs a shell script with bun's own shell")
			return
		}
	case "ls", "list", "ll", "la", "why", "explain", "config", "root", "prefix", "bin", "help", "pack", "pm":
		// Held to the tool's readOnly forms (devTool).
		category = v1alpha1.CategoryReadOnly
		switch {
		case sub == "config" && script == "edit":
			c.addWithReason(w, v1alpha1.CategoryUnknown, "config edit runs the editor that --editor, EDITOR or the configuration names")
			return
		case sub == "config" && script != "" && script != "get" && script != "list" && script != "ls":
			category = v1alpha1.CategoryWrite
		}
	case "view", "info", "show", "outdated", "audit", "search", "publish", "login", "logout", "whoami", "ping":
		category = v1alpha1.CategoryNetwork
	default:
		c.addWithReason(w, v1alpha1.CategoryUnknown, fmt.Sprintf("%s %s is a built-in command of %s that toolgate does not classify (it may install, fetch, delete or change the tool itself)", w[0].text, sub, w[0].text))
		return
	}
	c.add(w, category)
}

// scriptCategory classifies a package script by its conventional name: test and lint
// scripts test, build scripts build, and anything else runs project code like a build.
func scriptCategory(name string) v1alpha1.CommandCategory {
	switch {
	case name == "":
		return v1alpha1.CategoryReadOnly // lists the scripts
	case strings.HasPrefix(name, "test"), strings.HasPrefix(name, "lint"), strings.HasPrefix(name, "check"), strings.HasPrefix(name, "typecheck"):
		return v1alpha1.CategoryTest
	default:
		return v1alpha1.CategoryBuild
	}
}

// pip classifies pip (and uv pip, poetry) subcommands.
func pip(c *classifier, w []word, _ int) {
	c.add(w, pipCategory(w))
}

func pipCategory(w []word) v1alpha1.CommandCategory {
	if hasFlag(w[1:], "V", "version") {
		return v1alpha1.CategoryReadOnly
	}
	ops := operands(w[1:])
	if len(ops) == 0 {
		return v1alpha1.CategoryReadOnly
	}
	switch ops[0].text {
	case "install", "uninstall", "download", "sync", "add", "remove", "update", "lock", "wheel", "pip", "venv", "init", "new", "tool":
		if ops[0].text == "pip" && len(ops) > 1 {
			return pipCategory(ops[0:])
		}
		return v1alpha1.CategoryInstall
	case "list", "show", "freeze", "check", "help", "inspect", "tree", "cache", "config", "debug", "hash":
		return v1alpha1.CategoryReadOnly
	case "search", "index", "publish":
		return v1alpha1.CategoryNetwork
	case "build":
		return v1alpha1.CategoryBuild
	}
	return v1alpha1.CategoryUnknown
}

// runner handles uv and poetry: "run CMD..." classifies CMD, after what run itself
// does first (prepare), and anything else is a package-manager subcommand. run
// puts the project's environment first on PATH (what declares it).
func runner(pm handler, what adds) handler {
	return func(c *classifier, w []word, depth int) {
		ops := operands(w[1:])
		if len(ops) > 1 && ops[0].text == "run" {
			// The command after run starts at the second operand; its own options
			// come after it.
			for i, a := range w {
				if a.text != "run" {
					continue
				}
				rest := w[i+1:]
				synced := true
				if w[0].text == "uv" && len(rest) > 0 && rest[0].text == "--no-sync" {
					rest, synced = rest[1:], false
				}
				switch {
				case w[0].text == "uv" && synced:
					c.addWithReason(w, v1alpha1.CategoryInstall, "uv run first locks and syncs the project's environment: it resolves packages against the index, installs them and builds the project (uv run --no-sync does not)")
				case w[0].text == "poetry":
					c.addWithReason(w, v1alpha1.CategoryWrite, "poetry run creates the project's virtualenv when there is none")
				}
				if len(rest) > 0 && strings.HasPrefix(rest[0].text, "-") {
					// --with installs packages, -m runs a module: options of run are
					// not followed.
					c.addWithReason(w, v1alpha1.CategoryUnknown, "options of run install packages or choose what runs")
					return
				}
				n := len(c.parts)
				c.command(rest, depth+1, true)
				what.apply(c, w, n)
				return
			}
		}
		pm(c, w, depth)
	}
}

// python runs arbitrary code unless it runs a known module.
func python(c *classifier, w []word, depth int) {
	args := w[1:]
	if hasFlag(args, "V", "version") && len(args) == 1 {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	// Only "python -m MODULE": an option before -m (-c CODE) runs code of its own.
	for i, a := range args {
		if a.text != "-m" || i+1 >= len(args) || i != 0 {
			continue
		}
		module := args[i+1].text
		switch module {
		case "pytest", "unittest", "doctest", "tox", "nox":
			c.add(w, v1alpha1.CategoryTest)
		case "pip":
			// What pip would do, as plain pip's forms tell; and python imports pip from
			// the working directory first, so a package named pip there runs instead:
			// none of it is read-only.
			pw := append([]word{{text: "pip", static: true}}, args[i+2:]...)
			category, reason := pipCategory(pw), ""
			if category == v1alpha1.CategoryReadOnly {
				category, reason = v1alpha1.CategoryBuild, "python -m imports pip from the working directory first: a package named pip there would run"
				if len(pw) > 1 {
					if problem := devFormProblem(pipReadOnly, pw); problem != "" {
						category, reason = v1alpha1.CategoryUnknown, problem
					}
				}
			}
			c.addWithReason(w, category, reason)
		case "venv", "compileall", "black", "isort":
			c.add(w, v1alpha1.CategoryWrite)
		case "http.server":
			c.add(w, v1alpha1.CategoryNetwork)
		case "json.tool", "site", "tabnanny":
			// python puts the working directory first on the module path, so a
			// workspace package named json runs instead.
			c.addWithReason(w, v1alpha1.CategoryUnknown, "python -m imports the module from the working directory first")
		default:
			c.add(w, v1alpha1.CategoryUnknown)
		}
		return
	}
	c.add(w, v1alpha1.CategoryUnknown)
}

// makeCmd classifies make by its targets: test targets test, install installs,
// clean deletes, anything else (including the default target) builds. -n only prints.
func makeCmd(c *classifier, w []word, _ int) {
	args := w[1:]
	for _, a := range args {
		if t := a.text; t == "--" {
			break
		} else if strings.HasPrefix(t, "--ev") || (strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "--") && strings.ContainsRune(t, 'E')) {
			// An inline makefile is not the project's code: it is whatever the
			// command says, even under -n ($(shell ...) runs).
			c.addWithReason(w, v1alpha1.CategoryUnknown, "make --eval (-E) runs a makefile given on the command line")
			return
		}
	}
	if hasFlag(args, "nq", "dry-run", "just-print", "question", "recon") {
		// make -n still expands $(shell ...) and runs recursive + lines.
		c.addWithReason(w, v1alpha1.CategoryBuild, "make -n still runs $(shell ...) in the makefile")
		return
	}
	category := v1alpha1.CategoryBuild
	targets := 0
	for i := 0; i < len(args); i++ {
		t := args[i].text
		if t == "-C" || t == "-f" || t == "-j" || t == "-I" || t == "-o" || t == "-W" {
			i++
			continue
		}
		if strings.HasPrefix(t, "-") || strings.Contains(t, "=") {
			continue
		}
		targets++
		var target v1alpha1.CommandCategory
		switch {
		case t == "test" || t == "tests" || t == "check" || strings.HasPrefix(t, "test-") || strings.HasPrefix(t, "test_") || t == "lint" || t == "vet":
			target = v1alpha1.CategoryTest
		case t == "install":
			target = v1alpha1.CategoryInstall
		case t == "clean" || t == "distclean" || t == "mrproper":
			target = v1alpha1.CategoryDelete
		default:
			target = v1alpha1.CategoryBuild
		}
		if targets == 1 {
			category = target
		} else {
			category = strictestOf(category, target)
		}
	}
	c.add(w, category)
}

func cargo(c *classifier, w []word, _ int) {
	ops := operands(w[1:])
	if len(ops) == 0 || hasFlag(w[1:], "V", "version") {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	for _, a := range w[1:] {
		if t := a.text; t == "--" {
			break
		} else if t == "--config" || strings.HasPrefix(t, "--config=") || t == "-Z" || strings.HasPrefix(t, "-Z") {
			// target.*.runner, build.rustc-wrapper, doc.browser: configuration given
			// here runs what it names.
			c.addWithReason(w, v1alpha1.CategoryUnknown, "cargo --config and -Z set configuration that names programs cargo runs")
			return
		}
	}
	var category v1alpha1.CommandCategory
	switch ops[0].text {
	case "test", "t", "bench", "nextest":
		category = v1alpha1.CategoryTest
	case "build", "b", "check", "c", "clippy", "doc", "d", "run", "r":
		category = v1alpha1.CategoryBuild
	case "fmt", "fix", "new", "init":
		category = v1alpha1.CategoryWrite
	case "install", "add", "remove", "rm", "update", "fetch", "vendor", "generate-lockfile":
		category = v1alpha1.CategoryInstall
	case "publish", "search", "login", "yank", "owner":
		category = v1alpha1.CategoryNetwork
	case "clean":
		category = v1alpha1.CategoryDelete
	case "help", "version", "locate-project", "pkgid", "verify-project":
		category = v1alpha1.CategoryReadOnly
	case "tree", "metadata":
		// They update the registry index when the lock file is not enough.
		category = v1alpha1.CategoryNetwork
	default:
		category = v1alpha1.CategoryUnknown
	}
	c.add(w, category)
}

// javaBuild classifies mvn and gradle by their goals or tasks: only test goals is a
// test run; install and deploy install; clean deletes; anything else builds.
func javaBuild(c *classifier, w []word, _ int) {
	goals := operands(w[1:])
	category := v1alpha1.CategoryBuild
	onlyTests := len(goals) > 0
	for _, o := range goals {
		goal := o.text
		if i := strings.LastIndex(goal, ":"); i >= 0 {
			goal = goal[i+1:]
		}
		switch goal {
		case "test", "verify", "check", "integration-test":
			continue
		case "install", "publish", "deploy", "dependencies":
			category = strictestOf(category, v1alpha1.CategoryInstall)
		case "clean":
			category = strictestOf(category, v1alpha1.CategoryDelete)
		}
		onlyTests = false
	}
	if onlyTests {
		category = v1alpha1.CategoryTest
	}
	c.add(w, category)
}

func hasWord(args []word, s string) bool {
	for _, a := range args {
		if a.text == s {
			return true
		}
	}
	return false
}

func set(items ...string) map[string]bool {
	out := make(map[string]bool, len(items))
	for _, i := range items {
		out[i] = true
	}
	return out
}

// devForm is a read-only form of a development tool's subcommand: the flags it may
// take (by name without dashes, true when the flag takes a value in the next word)
// and, when not nil, the words its first operand may be (npm config get).
type devForm struct {
	flags        map[string]bool
	firstOperand map[string]bool
	// noOperands says an operand makes the form run another program (cargo help
	// NAME runs man, or cargo-NAME).
	noOperands bool
}

// versionFlags print a tool's version.
var versionFlags = set("--version", "-V", "-v", "version")

// devTool wraps the handler of a development tool: its subcommand must be its first
// word (an option before it could take the next word as its value, and the word
// after that would be the real subcommand: go -C version run .), and a part the
// handler calls read-only stays read-only only in a form of readOnly.
func devTool(h handler, readOnly map[string]devForm) handler {
	return func(c *classifier, w []word, depth int) {
		if len(w) > 1 && strings.HasPrefix(w[1].text, "-") {
			if len(w) == 2 && versionFlags[w[1].text] {
				c.add(w, v1alpha1.CategoryReadOnly)
				return
			}
			c.addWithReason(w, v1alpha1.CategoryUnknown, "an option before the subcommand: its value could be taken for the subcommand")
			return
		}
		n := len(c.parts)
		h(c, w, depth)
		if len(w) < 2 {
			return
		}
		for i := n; i < len(c.parts); i++ {
			p := &c.parts[i]
			if p.Category != v1alpha1.CategoryReadOnly || len(p.Argv) != len(w) || p.Argv[0] != w[0].text {
				continue
			}
			if problem := devFormProblem(readOnly, w); problem != "" {
				p.Category, p.Reason = v1alpha1.CategoryUnknown, problem
			}
		}
	}
}

func devFormProblem(readOnly map[string]devForm, w []word) string {
	sub := w[1].text
	form, ok := readOnly[sub]
	if !ok {
		return fmt.Sprintf("%s %s is not known to be read-only", w[0].text, sub)
	}
	operands := 0
	for i := 2; i < len(w); i++ {
		t := w[i].text
		if !strings.HasPrefix(t, "-") || t == "-" {
			if form.noOperands {
				return fmt.Sprintf("%s %s %s runs another program (man, or %s-%s)", w[0].text, sub, t, w[0].text, t)
			}
			if operands == 0 && form.firstOperand != nil && !form.firstOperand[t] {
				return fmt.Sprintf("%s %s %s is not known to be read-only", w[0].text, sub, t)
			}
			operands++
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(t, "-"), "=")
		valued, ok := form.flags[name]
		if !ok {
			return fmt.Sprintf("%s %s: toolgate does not know the option %s", w[0].text, sub, t)
		}
		if valued && !hasValue {
			i++
		}
	}
	if form.firstOperand != nil && operands == 0 {
		return fmt.Sprintf("%s %s with no operand is not known to be read-only", w[0].text, sub)
	}
	return ""
}

func flags(valued string, plain ...string) map[string]bool {
	out := map[string]bool{}
	for _, f := range strings.Fields(valued) {
		out[f] = true
	}
	for _, f := range plain {
		out[f] = false
	}
	return out
}

// Read-only forms of the development tools. Everything else they do is test,
// build, install, network or unknown (see their handlers).
var (
	goReadOnly = map[string]devForm{
		"version": {flags: flags("", "m", "v")},
		"env":     {flags: flags("", "json", "changed")},
		// -export, -compiled, -toolexec and -exec build or run programs.
		// -u and -versions ask the module proxy; -mod=mod may download and rewrite
		// go.mod.
		"list": {flags: flags("f tags", "json", "m", "e", "find", "deps", "test")},
		"doc":  {flags: flags("", "all", "c", "cmd", "short", "src", "u")},
		"help": {flags: flags("")},
	}
	npmReadOnly = map[string]devForm{
		"ls":      {flags: flags("depth omit include workspace w", "all", "a", "long", "l", "json", "parseable", "p", "global", "g", "link", "package-lock-only", "unicode")},
		"list":    {flags: flags("depth omit include workspace w", "all", "a", "long", "l", "json", "parseable", "p", "global", "g", "link", "package-lock-only", "unicode")},
		"ll":      {flags: flags("depth", "all", "a", "json", "global", "g")},
		"la":      {flags: flags("depth", "all", "a", "json", "global", "g")},
		"why":     {flags: flags("", "json")},
		"explain": {flags: flags("", "json")},
		"root":    {flags: flags("", "global", "g")},
		"prefix":  {flags: flags("", "global", "g")},
		"config":  {flags: flags("location", "json", "global", "g", "long", "l"), firstOperand: set("get", "list", "ls")},
		"run":     {flags: flags("")},
	}
	// yarn's forms are those that only read in yarn 1 and in yarn 4 alike; every
	// yarn command still runs the project's yarnPath first (nodeTools).
	yarnReadOnly = map[string]devForm{
		"why":    {flags: flags("", "json", "R", "recursive", "peers")},
		"bin":    {flags: flags("", "v", "verbose", "json")},
		"config": {flags: flags("", "json", "why"), firstOperand: set("get")},
		"help":   {flags: flags(""), noOperands: true},
	}
	// pnpm's forms (pnpm 9 and 10); every pnpm command still loads the project's
	// .pnpmfile.cjs first (nodeTools).
	pnpmReadOnly = map[string]devForm{
		"ls":     {flags: flags("depth", "json", "long", "parseable", "global", "g", "prod", "P", "dev", "D", "no-optional", "only-projects", "exclude-peers")},
		"list":   {flags: flags("depth", "json", "long", "parseable", "global", "g", "prod", "P", "dev", "D", "no-optional", "only-projects", "exclude-peers")},
		"ll":     {flags: flags("depth", "json", "parseable", "global", "g", "prod", "P", "dev", "D")},
		"la":     {flags: flags("depth", "json", "parseable", "global", "g", "prod", "P", "dev", "D")},
		"why":    {flags: flags("depth", "json", "long", "parseable", "global", "g", "prod", "P", "dev", "D")},
		"root":   {flags: flags("", "global", "g")},
		"bin":    {flags: flags("", "global", "g")},
		"config": {flags: flags("location", "json", "global", "g"), firstOperand: set("get", "list")},
	}
	// bun's forms (bun 1.4); bun why and bun list are scripts for older bun.
	bunReadOnly = map[string]devForm{
		"pm": {flags: flags("", "all", "prod", "trusted", "g"), firstOperand: set("ls", "bin")},
	}
	pipReadOnly = map[string]devForm{
		"list":   {flags: flags("format path exclude", "l", "local", "user", "not-required", "exclude-editable", "include-editable", "e", "editable", "v", "verbose", "q", "quiet")},
		"freeze": {flags: flags("path exclude", "l", "local", "user", "all", "exclude-editable", "v", "verbose", "q", "quiet")},
		"show":   {flags: flags("", "f", "files", "v", "verbose", "q", "quiet")},
		"check":  {flags: flags("", "v", "verbose", "q", "quiet")},
		"help":   {flags: flags("")},
		"hash":   {flags: flags("a algorithm")},
		"debug":  {flags: flags("", "v", "verbose")},
		"config": {flags: flags(""), firstOperand: set("list", "get")},
		"cache":  {flags: flags(""), firstOperand: set("dir", "info", "list")},
	}
	cargoReadOnly = map[string]devForm{
		"help":           {flags: flags(""), noOperands: true},
		"version":        {flags: flags("", "v", "verbose")},
		"locate-project": {flags: flags("manifest-path message-format color", "workspace", "q", "quiet", "offline", "frozen", "locked")},
		"pkgid":          {flags: flags("manifest-path p package color", "q", "quiet", "offline", "frozen", "locked")},
		"verify-project": {flags: flags("manifest-path color", "q", "quiet", "offline", "frozen", "locked")},
	}
)
