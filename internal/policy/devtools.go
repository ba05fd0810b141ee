package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

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
