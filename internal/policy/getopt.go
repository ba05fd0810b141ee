package policy

import (
	"fmt"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// grammar is what toolgate knows of one command's options and operands. A part is
// read-only only when every word of it fits its command's grammar: an option the
// grammar does not know, or a word it cannot check, makes the part unknown.
//
// Options are parsed the way GNU getopt_long parses them, because that is how the
// commands themselves read them: short options bundle (-rn), a short option's value
// may be attached (-n5) or the next word (-n 5), a long option's value follows = or
// is the next word, and "--" ends the options. Whether options may follow operands
// is the program's own choice, and every grammar declares it (order).
type grammar struct {
	// order says whether the program reads options after its first operand. It has
	// no default: a grammar that does not declare it makes every part it parses
	// unknown, and TestEveryGrammarDeclaresItsOrder fails.
	order optionOrder
	// short lists the short options: a letter alone takes no value, "x:" requires a
	// value, "x::" takes an optional value that must be attached (-x5).
	short string
	// long lists the long options, space separated: "name" takes no value, "name="
	// requires one, "name[=]" takes an optional value that must follow "=". --help and
	// --version are always known.
	long string
	// complete says long lists every long option the command has (taken from its
	// --help), so an unambiguous prefix (--num for --numeric-sort) is resolved as
	// getopt_long resolves it. Without it a prefix is refused: the command may have
	// an option the table does not list that the prefix would name exactly.
	complete bool
	// effects are options that make the part something other than read-only, keyed
	// by short letter or long name: sort -o writes, sort --compress-program runs a
	// program.
	effects map[string]v1alpha1.CommandCategory
	// dynamic says every option the command has only reads, so a word the classifier
	// cannot resolve ("$f", *.go, {a,b}) is accepted wherever it lands. Without it
	// such a word is unknown: it could expand to an option that runs a program.
	dynamic bool
	// digits says -NUM is an option (head -20, tail -5, xargs is not).
	digits bool
	// operands checks the operands when they matter (uniq IN OUT writes OUT); nil
	// accepts any operand. For a program that permutes it is called with both
	// readings of the words (see parsedArgs.posixOperands).
	operands func(ops []word) (v1alpha1.CommandCategory, string)

	// longs is long, read once: grammars are shared by concurrent decisions.
	longsOnce sync.Once
	longs     []longOption
}

// optionOrder says where a program reads options.
type optionOrder uint8

const (
	// orderUndeclared is the zero value: the grammar does not say, and is refused.
	orderUndeclared optionOrder = iota
	// permutes: options may follow operands, as GNU getopt_long reads them by
	// default (sort notes.txt -o out writes out).
	permutes
	// stopsAtOperand: the first operand ends the options, and every later word is
	// an operand however it is spelled: getopt with a "+" optstring (env, nice,
	// timeout, xargs, tr, seq, basename), POSIX utilities, Go's flag package
	// (gofmt x.go -w formats nothing and reads a file named -w), awk (whose first
	// operand is the program), bash's builtins.
	stopsAtOperand
)

// longOption is one long option of a grammar.
type longOption struct {
	name string
	// value is "" (no value), "=" (required) or "[=]" (optional, attached).
	value string
}

// parsedArgs is the result of parsing a command's arguments with its grammar.
type parsedArgs struct {
	// category is read-only unless an option's effect, an unknown option or an
	// unresolvable word says otherwise; reason explains anything but read-only.
	category v1alpha1.CommandCategory
	reason   string
	// options in order, by the name the grammar knows them ("o", "output"), with
	// their values.
	options []parsedOption
	// operands in order.
	operands []word
	// posixOperands, for a program that permutes, are the operands as it reads them
	// when POSIXLY_CORRECT is set in its environment (which the classifier cannot
	// always see): the first operand and every word after it, "-o" and "--"
	// included. nil when that is operands.
	posixOperands []word
}

// operandReadings are the lists of operands the program may read: operands, and
// posixOperands when they differ. A check of operands must hold for each.
func (p *parsedArgs) operandReadings() [][]word {
	if p.posixOperands == nil {
		return [][]word{p.operands}
	}
	return [][]word{p.operands, p.posixOperands}
}

type parsedOption struct {
	name  string
	value string
	// hasValue says a value was given.
	hasValue bool
}

func (p *parsedArgs) raise(category v1alpha1.CommandCategory, reason string) {
	if Stricter(category, p.category) {
		p.category, p.reason = category, reason
	}
}

// has reports whether option name (a short letter or a long name) was given.
func (p *parsedArgs) has(names ...string) bool {
	for _, o := range p.options {
		for _, n := range names {
			if o.name == n {
				return true
			}
		}
	}
	return false
}

func (g *grammar) longOptions() []longOption {
	g.longsOnce.Do(func() { g.longs = readLongOptions(g.long) })
	return g.longs
}

func readLongOptions(long string) []longOption {
	fields := strings.Fields(long)
	out := make([]longOption, 0, len(fields)+2)
	for _, f := range fields {
		switch {
		case strings.HasSuffix(f, "[=]"):
			out = append(out, longOption{name: strings.TrimSuffix(f, "[=]"), value: "[=]"})
		case strings.HasSuffix(f, "="):
			out = append(out, longOption{name: strings.TrimSuffix(f, "="), value: "="})
		default:
			out = append(out, longOption{name: f})
		}
	}
	return append(out, longOption{name: "help"}, longOption{name: "version"})
}

// resolveLong finds the long option a word names: an exact name, or with a complete
// table an unambiguous prefix. ok is false with a reason when it names none or more
// than one.
func (g *grammar) resolveLong(name string) (longOption, string) {
	opts := g.longOptions()
	for _, o := range opts {
		if o.name == name {
			return o, ""
		}
	}
	if !g.complete {
		return longOption{}, fmt.Sprintf("unknown option --%s", name)
	}
	var matches []longOption
	for _, o := range opts {
		if strings.HasPrefix(o.name, name) {
			matches = append(matches, o)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], ""
	case 0:
		return longOption{}, fmt.Sprintf("unknown option --%s", name)
	}
	names := make([]string, len(matches))
	for i, m := range matches {
		names[i] = "--" + m.name
	}
	return longOption{}, fmt.Sprintf("option --%s is ambiguous (%s)", name, strings.Join(names, ", "))
}

// shortValue says whether short option r is known and how it takes a value: "",
// ":" (required) or "::" (optional, attached).
func (g *grammar) shortValue(r byte) (string, bool) {
	i := strings.IndexByte(g.short, r)
	if i < 0 || r == ':' {
		return "", false
	}
	rest := g.short[i+1:]
	switch {
	case strings.HasPrefix(rest, "::"):
		return "::", true
	case strings.HasPrefix(rest, ":"):
		return ":", true
	}
	return "", true
}

// parse reads args (the words after the command name) with the grammar.
func (g *grammar) parse(args []word) parsedArgs {
	p := parsedArgs{category: v1alpha1.CategoryReadOnly}
	if g.order == orderUndeclared {
		p.raise(v1alpha1.CategoryUnknown, "toolgate's grammar of this command does not say whether it reads options after operands")
		return p
	}
	stops := g.order == stopsAtOperand
	// firstOperand is the index in args of the first operand met while options are
	// still read (-1 before it): from there on a program that permutes reads
	// operands only, under POSIXLY_CORRECT.
	firstOperand := -1
	unresolvable := func(w word) {
		if !g.dynamic {
			p.raise(v1alpha1.CategoryUnknown, fmt.Sprintf("%s cannot be checked before it runs: it could expand to an option", w.text))
		}
	}
	effect := func(key, dashes string) {
		if c, ok := g.effects[key]; ok {
			p.raise(c, fmt.Sprintf("option %s%s %s", dashes, key, effectVerb(c)))
		}
	}
	// operand and option append to lists made once, as long as the words left.
	operand := func(i int, a word, optionsStillRead bool) {
		if p.operands == nil {
			p.operands = make([]word, 0, len(args)-i)
		}
		p.operands = append(p.operands, a)
		if optionsStillRead && firstOperand < 0 {
			firstOperand = i
		}
	}
	option := func(i int, o parsedOption) {
		if p.options == nil {
			p.options = make([]parsedOption, 0, len(args)-i)
		}
		p.options = append(p.options, o)
	}
	onlyOperands := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !a.static || a.split {
			// After "--", or when it cannot start with "-", it is an operand.
			if !onlyOperands && !a.operandOnly() {
				unresolvable(a)
			}
			operand(i, a, !onlyOperands)
			onlyOperands = onlyOperands || stops
			continue
		}
		t := a.text
		if onlyOperands || t == "-" || !strings.HasPrefix(t, "-") {
			operand(i, a, !onlyOperands)
			onlyOperands = onlyOperands || stops
			continue
		}
		if t == "--" {
			onlyOperands = true
			continue
		}
		if strings.HasPrefix(t, "--") {
			name, value, hasValue := strings.Cut(t[2:], "=")
			o, problem := g.resolveLong(name)
			if problem != "" {
				p.raise(v1alpha1.CategoryUnknown, problem)
				continue
			}
			switch o.value {
			case "":
				if hasValue {
					p.raise(v1alpha1.CategoryUnknown, fmt.Sprintf("option --%s takes no value", o.name))
				}
			case "=":
				if !hasValue {
					if i+1 >= len(args) {
						p.raise(v1alpha1.CategoryUnknown, fmt.Sprintf("option --%s needs a value", o.name))
						continue
					}
					i++
					if args[i].split {
						unresolvable(args[i])
					}
					value, hasValue = args[i].text, true
				}
			}
			option(i, parsedOption{name: o.name, value: value, hasValue: hasValue})
			effect(o.name, "--")
			continue
		}
		// A bundle of short options: -rn, -n5, -n 5.
		if g.digits && isDigits(t[1:]) {
			option(i, parsedOption{name: "NUM", value: t[1:], hasValue: true})
			continue
		}
		for j := 1; j < len(t); j++ {
			letter := t[j]
			kind, ok := g.shortValue(letter)
			if !ok {
				p.raise(v1alpha1.CategoryUnknown, fmt.Sprintf("unknown option -%c", letter))
				break
			}
			// t[j:j+1] is string(letter) without allocating: a known letter is ASCII.
			opt := parsedOption{name: t[j : j+1]}
			switch kind {
			case ":":
				if j+1 < len(t) {
					opt.value, opt.hasValue = t[j+1:], true
				} else if i+1 < len(args) {
					i++
					if args[i].split {
						unresolvable(args[i])
					}
					opt.value, opt.hasValue = args[i].text, true
				} else {
					p.raise(v1alpha1.CategoryUnknown, fmt.Sprintf("option -%c needs a value", letter))
				}
				j = len(t)
			case "::":
				if j+1 < len(t) {
					opt.value, opt.hasValue = t[j+1:], true
				}
				j = len(t)
			}
			option(i, opt)
			effect(opt.name, "-")
		}
	}
	if !stops && firstOperand >= 0 && len(args)-firstOperand != len(p.operands) {
		p.posixOperands = args[firstOperand:]
	}
	if g.operands != nil {
		for _, ops := range p.operandReadings() {
			if c, reason := g.operands(ops); c != v1alpha1.CategoryReadOnly {
				p.raise(c, reason)
			}
		}
	}
	return p
}

func effectVerb(c v1alpha1.CommandCategory) string {
	switch c {
	case v1alpha1.CategoryWrite:
		return "writes files"
	case v1alpha1.CategoryDelete:
		return "deletes files"
	case v1alpha1.CategoryNetwork:
		return "uses the network"
	case v1alpha1.CategoryPrivilege:
		return "changes the system"
	case v1alpha1.CategoryUnknown:
		return "runs a program or reads instructions toolgate does not check"
	}
	return "makes the call " + string(c)
}
