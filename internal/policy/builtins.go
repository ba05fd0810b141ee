package policy

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// builtinHandlers are the bash builtins that can be read-only, each with what makes
// it otherwise. bash's builtins stop reading options at their first operand (type
// ls -a looks up a command named -a). The builtins that change how bash looks up or evaluates later words
// (hash, enable, shopt, trap, alias, let, ...) are unknown in commands.go.
var builtinHandlers = map[string]handler{
	":":        anyArguments,
	"true":     anyArguments,
	"false":    anyArguments,
	"echo":     anyArguments,
	"pwd":      grammarCommand(&grammar{order: stopsAtOperand, short: "LP", dynamic: true}),
	"cd":       grammarCommand(&grammar{order: stopsAtOperand, short: "LPe@", dynamic: true}),
	"pushd":    anyArguments,
	"popd":     anyArguments,
	"dirs":     anyArguments,
	"exit":     anyArguments,
	"return":   anyArguments,
	"break":    anyArguments,
	"continue": anyArguments,
	"shift":    anyArguments,
	// jobs -x runs a command.
	// Not dynamic: jobs -x runs its operands as a command.
	"jobs":  grammarCommand(&grammar{order: stopsAtOperand, short: "lnprs"}),
	"times": anyArguments,
	"umask": grammarCommand(&grammar{order: stopsAtOperand, short: "pS", dynamic: true}),
	"type":  grammarCommand(&grammar{order: stopsAtOperand, short: "afptP", dynamic: true}),
	"wait": grammarCommand(&grammar{order: stopsAtOperand, short: "fnp:", effects: map[string]v1alpha1.CommandCategory{
		// -p NAME sets a variable, whose name could hold a subscript.
		"p": v1alpha1.CategoryUnknown,
	}}),
	"printf":    printfBuiltin,
	"test":      testBuiltin,
	"[":         testBuiltin,
	"read":      binder(&grammar{order: stopsAtOperand, short: "ersa:d:i:n:N:p:t:u:", dynamic: true}, "a"),
	"mapfile":   binder(&grammar{order: stopsAtOperand, short: "d:n:O:s:tu:C:c:", effects: map[string]v1alpha1.CommandCategory{"C": v1alpha1.CategoryUnknown}}, ""),
	"readarray": binder(&grammar{order: stopsAtOperand, short: "d:n:O:s:tu:C:c:", effects: map[string]v1alpha1.CommandCategory{"C": v1alpha1.CategoryUnknown}}, ""),
	"getopts":   getoptsBuiltin,
	"unset":     unsetBuiltin,
	"set":       setBuiltin,
}

func anyArguments(c *classifier, w []word, _ int) { c.add(w, v1alpha1.CategoryReadOnly) }

// printf -v NAME assigns, and NAME can hold a subscript that runs a command
// substitution (printf -v 'a[$(rm x)]' 1); a first word that could expand to -v is
// unknown for the same reason.
func printfBuiltin(c *classifier, w []word, _ int) {
	if len(w) < 2 {
		c.add(w, v1alpha1.CategoryReadOnly)
		return
	}
	first := w[1]
	switch {
	case first.static && first.text == "--":
	case first.static && strings.HasPrefix(first.text, "-v"):
		c.addWithReason(w, v1alpha1.CategoryUnknown, "printf -v assigns a variable, and its name can run a command substitution")
		return
	case !first.operandOnly():
		c.addWithReason(w, v1alpha1.CategoryUnknown, first.text+" could expand to printf -v")
		return
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

// testOperators are the operators of test and [ other than -v and -R; a word after
// one of them is its operand, whatever it expands to.
var testOperators = set("!", "(", ")", "-a", "-o", "-b", "-c", "-d", "-e", "-f", "-g", "-h", "-k", "-L", "-n", "-N", "-O",
	"-G", "-p", "-r", "-s", "-S", "-t", "-u", "-w", "-x", "-z", "=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le",
	"-gt", "-ge", "-nt", "-ot", "-ef")

// testBinary are the binary operators: a word before one is its left operand.
var testBinary = set("=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt", "-ot", "-ef")

// testConnectives are the words of test's grammar that take no operand of their own:
// what follows "!", "(", "-a" or "-o" starts a new expression, and may be -v.
var testConnectives = set("!", "(", ")", "-a", "-o")

// test and [ evaluate -v NAME and -R NAME by expanding NAME's subscript, which runs
// command substitutions. A word known only when it runs is accepted where it can only
// be an operand: right after an operator that takes one, right before a binary
// operator, or alone; anywhere else it could be the -v ([ "$x" "$y" ] with x=-v, and
// [ ! "$y" NAME ] with y=-v).
func testBuiltin(c *classifier, w []word, _ int) {
	args := w[1:]
	if w[0].text == "[" && len(args) > 0 && args[len(args)-1].static && args[len(args)-1].text == "]" {
		args = args[:len(args)-1]
	}
	isOp := func(i int, ops map[string]bool) bool {
		return i >= 0 && i < len(args) && args[i].static && !args[i].split && ops[args[i].text]
	}
	for i, a := range args {
		if a.static && !a.split {
			if a.text == "-v" || a.text == "-R" {
				c.addWithReason(w, v1alpha1.CategoryUnknown, "test "+a.text+" evaluates the subscript of the name it tests")
				return
			}
			continue
		}
		if a.split {
			c.addWithReason(w, v1alpha1.CategoryUnknown, a.text+" may split into an operator such as -v")
			return
		}
		operandOnly := len(args) == 1 || (isOp(i-1, testOperators) && !isOp(i-1, testConnectives)) || isOp(i+1, testBinary)
		if !operandOnly {
			c.addWithReason(w, v1alpha1.CategoryUnknown, a.text+" stands where an operator could, and could be -v")
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

// variableName is a name bash assigns without evaluating anything.
var variableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// binder handles builtins whose operands (and option arrayOption's value) name
// variables they set: each must be a plain name, and is checked like an assignment.
func binder(g *grammar, arrayOption string) handler {
	return func(c *classifier, w []word, _ int) {
		p := g.parse(w[1:])
		names := p.operands
		for _, o := range p.options {
			if arrayOption != "" && o.name == arrayOption {
				names = append(names, word{text: o.value, static: true})
			}
		}
		if p.category != v1alpha1.CategoryReadOnly {
			c.addWithReason(w, p.category, p.reason)
			return
		}
		for _, n := range names {
			if !n.static || !variableName.MatchString(n.text) {
				c.addWithReason(w, v1alpha1.CategoryUnknown, fmt.Sprintf("%s is not a plain variable name: a subscript in it runs command substitutions", n.text))
				return
			}
			c.binds(n.text, false)
		}
		c.add(w, v1alpha1.CategoryReadOnly)
	}
}

// getopts OPTSTRING NAME [ARG...] sets NAME.
func getoptsBuiltin(c *classifier, w []word, _ int) {
	if len(w) < 3 || !w[2].static || !variableName.MatchString(w[2].text) {
		c.addWithReason(w, v1alpha1.CategoryUnknown, "getopts needs a plain variable name")
		return
	}
	c.binds(w[2].text, false)
	c.add(w, v1alpha1.CategoryReadOnly)
}

// unset NAME evaluates a subscript in NAME.
func unsetBuiltin(c *classifier, w []word, _ int) {
	p := (&grammar{order: stopsAtOperand, short: "fvn"}).parse(w[1:])
	if p.category != v1alpha1.CategoryReadOnly {
		c.addWithReason(w, p.category, p.reason)
		return
	}
	for _, n := range p.operands {
		if !n.static || !variableName.MatchString(n.text) {
			c.addWithReason(w, v1alpha1.CategoryUnknown, fmt.Sprintf("%s is not a plain variable name: a subscript in it runs command substitutions", n.text))
			return
		}
		// unset PATH makes bash look commands up in the working directory.
		c.binds(n.text, false)
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}

// set is read-only with the options of shellFlags and shellOptions (set -euo
// pipefail) and with positional parameters after --; any other option (set -a
// exports every later assignment, set -T and -E change traps, set -o vi or emacs
// reads an inputrc) is unknown.
func setBuiltin(c *classifier, w []word, _ int) {
	args := w[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !a.static {
			c.addWithReason(w, v1alpha1.CategoryUnknown, a.text+" could expand to an option of set")
			return
		}
		t := a.text
		if t == "--" || t == "-" {
			break
		}
		if !strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "+") {
			break
		}
		if t == "-o" || t == "+o" {
			if i+1 < len(args) && !shellOptions[args[i+1].text] {
				c.addWithReason(w, v1alpha1.CategoryUnknown, "set -o "+args[i+1].text+" is not an option toolgate knows to be harmless")
				return
			}
			i++
			continue
		}
		for _, r := range t[1:] {
			if r == 'o' {
				if i+1 >= len(args) || !shellOptions[args[i+1].text] {
					c.addWithReason(w, v1alpha1.CategoryUnknown, "set -o with an option toolgate does not know to be harmless")
					return
				}
				i++
				continue
			}
			if r == 'c' || !strings.ContainsRune(shellFlags, r) {
				c.addWithReason(w, v1alpha1.CategoryUnknown, fmt.Sprintf("set %c%c changes how bash runs later commands", t[0], r))
				return
			}
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}
