package policy

import (
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Each handler here is registered through sensitive, so it gets static words
// only: a word known only when it runs could be any subcommand or option.

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

// pipReadOnly are the read-only forms of pip, uv and poetry. Everything else they
// do is install, build, network or unknown (pipCategory).
var pipReadOnly = map[string]devForm{
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
