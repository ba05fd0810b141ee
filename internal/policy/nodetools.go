package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Each handler here is registered through sensitive, so it gets static words
// only: a word known only when it runs could be any subcommand or option.

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

// Read-only forms of the JavaScript package managers. Everything else they do is
// test, build, install, network or unknown (nodePackageManager).
var (
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
)
