package policy

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// CoveredByPrefix says whether every part of a bash command starts with prefix
// (argv words), as an ApprovalGrant of scope CommandPrefix requires: `npm test
// --watch=false` is covered by [npm, test]; `npm test; rm -rf .`, `npm test && curl
// …`, `npm test > out` (a redirect is a part without argv) and `npm test $(rm -rf
// .)` (the substitution is a part of its own) are not. It returns why not, naming
// the part.
//
// Two checks, both required. The classifier's parts catch what runs inside other
// commands (bash -c, find -exec, substitutions); but it unwraps wrappers and drops
// assignments (`env -C /etc npm test`, `nice npm test`, `NODE_OPTIONS=… npm test`
// all become the part `npm test`), which change what runs. So every simple command
// of the source must also begin, as written, with the prefix's words: unquoted
// literals, no assignment before them.
func CoveredByPrefix(command string, prefix []string) (bool, string) {
	if len(prefix) == 0 {
		return false, "the grant has no command prefix"
	}
	if ok, why := writtenWithPrefix(command, prefix); !ok {
		return false, why
	}
	c := ClassifyCommand(command)
	if len(c.Parts) == 0 {
		return false, "the command has no part to match"
	}
	for _, p := range c.Parts {
		if len(p.Argv) == 0 || !argvHasPrefix(p.Argv, prefix) {
			return false, fmt.Sprintf("its part %q does not start with the granted prefix %q", p.Command, strings.Join(prefix, " "))
		}
	}
	return true, ""
}

// writtenWithPrefix says whether every simple command in the source begins with
// prefix as written: no wrapper, assignment or quoting in front of the words. A
// word made of anything but one unquoted literal does not match.
func writtenWithPrefix(command string, prefix []string) (bool, string) {
	parser := bashParsers.Get().(*syntax.Parser)
	file, err := parser.Parse(strings.NewReader(command), "")
	bashParsers.Put(parser)
	if err != nil {
		return false, "the command does not parse: " + err.Error()
	}
	why := ""
	syntax.Walk(file, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok || why != "" {
			return why == ""
		}
		covered := len(call.Assigns) == 0
		for i, w := range prefix {
			// A command shorter than the prefix is the classifier's to refuse,
			// naming its part.
			covered = covered && (i >= len(call.Args) || call.Args[i].Lit() == w)
		}
		if !covered {
			why = fmt.Sprintf("its part %q does not start with the granted prefix %q: the command does not begin with it as written (wrappers, assignments and quoting in front of it are not covered)", commandText(command, call), strings.Join(prefix, " "))
		}
		return covered
	})
	return why == "", why
}

// commandText is the source of a simple command, for messages.
func commandText(src string, call *syntax.CallExpr) string {
	start, end := int(call.Pos().Offset()), int(call.End().Offset())
	if start < 0 || end > len(src) || start > end {
		return ""
	}
	return src[start:end]
}
