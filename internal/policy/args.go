package policy

import (
	"strings"
)

// hasFlag reports whether any static argument is one of the short flags (each letter
// of short, also inside clusters such as -fdx) or long flags (--name or --name=value).
// Arguments after "--" are operands.
func hasFlag(args []word, short string, long ...string) bool {
	return findFlag(args, short, false, long)
}

// hasGitFlag is hasFlag for git's options, which git's parse-options takes by any
// unambiguous prefix too (--har is --hard, --del is --delete): a prefix of a listed
// name counts as it. Where git finds the prefix ambiguous it refuses to run.
func hasGitFlag(args []word, short string, long ...string) bool {
	return findFlag(args, short, true, long)
}

func findFlag(args []word, short string, prefixes bool, long []string) bool {
	for _, a := range args {
		t := a.text
		if t == "--" {
			return false
		}
		if strings.HasPrefix(t, "--") {
			name, _, _ := strings.Cut(t[2:], "=")
			for _, l := range long {
				if name == l || (prefixes && name != "" && strings.HasPrefix(l, name)) {
					return true
				}
			}
			continue
		}
		if strings.HasPrefix(t, "-") && len(t) > 1 && strings.ContainsAny(t[1:], short) && short != "" {
			return true
		}
	}
	return false
}

// operands returns the arguments that are not options. It does not know which
// options take values, so it is used only where that does not matter.
func operands(args []word) []word {
	var out []word
	for i, a := range args {
		if a.text == "--" {
			return append(out, args[i+1:]...)
		}
		if strings.HasPrefix(a.text, "-") && a.text != "-" {
			continue
		}
		if out == nil {
			out = make([]word, 0, len(args)-i)
		}
		out = append(out, a)
	}
	return out
}

func hasWord(args []word, s string) bool {
	for _, a := range args {
		if a.text == s {
			return true
		}
	}
	return false
}
