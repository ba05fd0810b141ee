package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// word is one shell word.
type word struct {
	// text is the word after quote removal when static, otherwise its source text.
	text string
	// static is true when the word holds only literals and quotes: its value is text.
	static bool
	// split is true when bash may turn the word into several words (or none) or into
	// other text than its source: an unquoted expansion, a glob, a brace expansion,
	// and quoted expansions that are not provably one word ("$@", "${!prefix@}"). An
	// operand counter counts such a word as several (atMostOperands refuses it).
	split bool
	// glob is true when the word is static text that pathname expansion may turn
	// into file names (split for that reason alone).
	glob bool
	// lead is the static text before the first expansion of a word that is not
	// static ("src/" of "src/$f"): when it does not start with "-", the word cannot
	// be an option.
	lead string
}

// operandOnly says the word cannot be an option, whatever it expands to.
func (w word) operandOnly() bool {
	switch {
	case w.static && !w.split:
		return !strings.HasPrefix(w.text, "-") || w.text == "-"
	case w.static && w.glob:
		// A file name matched by a pattern starts with the pattern's first
		// character when that is a literal one.
		return w.text != "" && strings.IndexByte("*?[-\\", w.text[0]) < 0
	case !w.static && !w.split:
		return w.lead != "" && !strings.HasPrefix(w.lead, "-")
	}
	return false
}

// wordOf resolves a word statically when it holds only literals and quotes.
func wordOf(w *syntax.Word) word {
	var b pieces
	// skeleton is the word as brace and pathname expansion see it: the unquoted
	// text, with each quoted or expanded part standing in as one letter, so that
	// {".","-delete"} and ["-"]x are seen across their quotes.
	var skeleton pieces
	out := word{static: true}
	dynamic := func(split bool) {
		if out.static {
			out.lead = b.String()
		}
		out.static = false
		out.split = out.split || split
	}
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			if i == 0 && strings.HasPrefix(p.Value, "~") {
				// ~ is $HOME, ~+ is $PWD and ~- is $OLDPWD: a variable's value.
				dynamic(false)
			}
			skeleton.WriteString(p.Value)
			b.WriteString(unescape(p.Value, false))
		case *syntax.SglQuoted:
			if p.Dollar && strings.Contains(p.Value, `\`) {
				// $'\x72m' is "rm": ANSI-C escapes are not resolved here.
				dynamic(false)
			}
			skeleton.WriteString("q")
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			skeleton.WriteString("q")
			if p.Dollar {
				// $"..." is translated by the locale's message catalogue.
				dynamic(false)
			}
			for _, inner := range p.Parts {
				lit, ok := inner.(*syntax.Lit)
				if !ok {
					dynamic(!oneWordInQuotes(inner))
					continue
				}
				b.WriteString(unescape(lit.Value, true))
			}
		case *syntax.ProcSubst:
			// <(cmd) becomes one /dev/fd/N path, never an option.
			skeleton.WriteString("q")
			if out.static && b.Len() == 0 {
				b.WriteString("/dev/fd/")
			}
			dynamic(false)
		default:
			skeleton.WriteString("q")
			dynamic(true)
		}
	}
	if hasBraceExpansion(skeleton.String()) {
		dynamic(true)
	}
	if hasGlob(skeleton.String()) {
		// Pathname expansion can turn the word into any file name, one spelled
		// like an option included.
		out.glob = out.static
		out.split = true
	}
	if !out.static {
		out.glob = false
		out.text = source(w)
		return out
	}
	out.text = b.String()
	return out
}

// oneWordInQuotes says whether a part of a double-quoted string always expands to
// exactly one word. "$@", "${a[@]}", "${!a[@]}", "${!prefix@}" and an indirect
// "${!x}" (x=@) expand to as many words as there are elements or names, none if there
// are none, and so do they nested in another expansion's word ("${x:-"$@"}",
// "${x+${a[@]}}"). The output of a substitution in quotes is one word.
func oneWordInQuotes(part syntax.WordPart) bool {
	switch p := part.(type) {
	case *syntax.CmdSubst, *syntax.ArithmExp:
		return true
	case *syntax.ParamExp:
		if !hasWords(p) {
			return !expandsToElements(p)
		}
	}
	one := true
	syntax.Walk(part, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			return false
		case *syntax.ParamExp:
			if expandsToElements(n) {
				one = false
			}
		}
		return one
	})
	return one
}

// hasWords says whether a parameter expansion holds words of its own (an operator's
// word, a replacement, a subscript, an offset) rather than only a name ($x, ${x}).
func hasWords(p *syntax.ParamExp) bool {
	return p.Exp != nil || p.Repl != nil || p.Index != nil || p.Slice != nil
}

// expandsToElements says whether a parameter expansion yields one word per element
// (quoted) rather than one string; ${#a[@]}, a count, is one.
func expandsToElements(p *syntax.ParamExp) bool {
	if p.Length {
		return false
	}
	if w, ok := p.Index.(*syntax.Word); ok && w.Lit() == "@" {
		return true
	}
	return paramName(p) == "@" || (p.Excl && (p.Names == syntax.NamesPrefixWords || p.Names == 0))
}

// pieces builds a string from pieces, allocating only when there is more than one
// non-empty piece: most words are one literal, whose text is that literal's.
type pieces struct {
	one  string
	many strings.Builder
}

func (p *pieces) WriteString(s string) {
	switch {
	case s == "":
	case p.many.Len() > 0:
		p.many.WriteString(s)
	case p.one == "":
		p.one = s
	default:
		p.many.Grow(len(p.one) + len(s))
		p.many.WriteString(p.one)
		p.many.WriteString(s)
		p.one = ""
	}
}

func (p *pieces) String() string {
	if p.many.Len() > 0 {
		return p.many.String()
	}
	return p.one
}

func (p *pieces) Len() int { return len(p.one) + p.many.Len() }

// hasGlob reports an unescaped *, ? or [...] in an unquoted literal.
func hasGlob(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '*', '?':
			return true
		case '[':
			if strings.IndexByte(s[i+1:], ']') >= 0 {
				return true
			}
		}
	}
	return false
}

// hasBraceExpansion reports a {a,b} or {1..3} in a word's skeleton. Any such shape
// counts, escaped or nested, so this may refuse a word bash leaves alone, never the
// other way round.
func hasBraceExpansion(s string) bool {
	for open := strings.IndexByte(s, '{'); open >= 0; {
		rest := s[open:]
		closing := strings.LastIndexByte(rest, '}')
		if closing < 0 {
			return false
		}
		if strings.Contains(rest[:closing], ",") || strings.Contains(rest[:closing], "..") {
			return true
		}
		next := strings.IndexByte(rest[1:], '{')
		if next < 0 {
			return false
		}
		open += next + 1
	}
	return false
}

// unescape removes the backslashes bash removes: before any character outside
// quotes, and before $ ` " \ and newline inside double quotes. A backslash-newline
// pair disappears.
func unescape(s string, inDouble bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			next := s[i+1]
			if next == '\n' {
				i++
				continue
			}
			if !inDouble || strings.IndexByte("$`\"\\", next) >= 0 {
				b.WriteByte(next)
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isWordByte says whether b can continue a shell word of letters, digits and _.
func isWordByte(b byte) bool {
	return b == '_' || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
