package policy

import (
	"fmt"
	"strings"
)

// CoveredByPrefix says whether every part of a bash command starts with prefix
// (argv words), as an ApprovalGrant of scope CommandPrefix requires: `npm test
// --watch=false` is covered by [npm, test]; `npm test; rm -rf .`, `npm test && curl
// …`, `npm test > out` (a redirect is a part without argv) and `npm test $(rm -rf
// .)` (the substitution is a part of its own) are not. The command must also begin
// with the prefix's first word: the classifier unwraps wrappers and assignments
// (`env NODE_OPTIONS=… npm test`), which change what the command does. It returns
// why not, naming the part.
func CoveredByPrefix(command string, prefix []string) (bool, string) {
	if len(prefix) == 0 {
		return false, "the grant has no command prefix"
	}
	if first := strings.Fields(command); len(first) == 0 || first[0] != prefix[0] {
		return false, fmt.Sprintf("the command does not begin with %q: wrappers, assignments and anything before the granted prefix are not covered", prefix[0])
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
