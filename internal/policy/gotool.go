package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Each handler here is registered through sensitive, so it gets static words
// only: a word known only when it runs could be any subcommand or option.

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

// goReadOnly are the read-only forms of go. Everything else it does is test,
// build, install, network or unknown (goCmd).
var goReadOnly = map[string]devForm{
	"version": {flags: flags("", "m", "v")},
	"env":     {flags: flags("", "json", "changed")},
	// -export, -compiled, -toolexec and -exec build or run programs.
	// -u and -versions ask the module proxy; -mod=mod may download and rewrite
	// go.mod.
	"list": {flags: flags("f tags", "json", "m", "e", "find", "deps", "test")},
	"doc":  {flags: flags("", "all", "c", "cmd", "short", "src", "u")},
	"help": {flags: flags("")},
}
