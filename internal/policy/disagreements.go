package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Reasons for refusing text that bash and the parser read differently.
const (
	// reasonQuotesInExpansion: "${x:-'$(cmd)'}" runs cmd in bash (quotedInExpansion).
	reasonQuotesInExpansion = "single quotes inside a ${...} expansion inside double quotes are literal characters to bash, which runs the substitutions they hold (the parser reads them as quotes and sees none); drop the single quotes or the double quotes"
	// reasonProcessInExpansion: ${x:-<(cmd)} runs cmd in bash (expansionWords).
	reasonProcessInExpansion = "a process substitution <(...) or >(...) inside a ${...} expansion runs in bash, while the parser reads it as text; use a variable or a plain word"
	// reasonDollarQuoteInExpansion: "${x:-$'\x24(cmd)'}" runs cmd (expansionWords).
	reasonDollarQuoteInExpansion = "bash decodes $'...' inside a ${...} expansion and, in double quotes or a substitution inside them, expands the result, which can run a command the parser does not see; use a variable or plain quotes"
	// reasonDollarContinuation: "$\" then "(cmd)" on the next line runs cmd
	// (script).
	reasonDollarContinuation = "a $ is followed by a backslash and a newline: bash joins the lines and expands what follows ($(...), ${...}, $@), the parser reads a plain $; join the lines"
	// reasonCommentBackslash: "# x \" then a line is a comment and a command to
	// bash, more words of the command before the comment to the parser (comment).
	reasonCommentBackslash = "a comment ends in a backslash: bash ends the comment at the newline and runs the next line, which the parser reads as part of the command before it; remove the backslash"
)

// quotedInExpansion refuses single quotes inside a parameter expansion inside double
// quotes (parts are those of a double-quoted string or of an unquoted here-document's
// body), where bash and the parser disagree. In "${x:-'$(cmd)'}" (and -, +, :+, =,
// :=) bash takes the single quotes as literal characters and expands what they hold,
// so cmd runs; the parser reads a quoted string and sees no command. A quoted string
// with nothing bash could expand is the same text to both, quotes aside, and stays.
//
// Every expansion operator is covered, not only those six: in pattern operators
// (${x#'...'}) bash reads the quotes as quotes, but an operator nested in one
// (${x#${y:-'...'}}) is expanded one way or the other depending on the outer one.
func (c *classifier) quotedInExpansion(parts []syntax.WordPart) {
	for _, part := range parts {
		pe, ok := part.(*syntax.ParamExp)
		if !ok || !hasWords(pe) {
			continue
		}
		syntax.Walk(pe, func(n syntax.Node) bool {
			switch n := n.(type) {
			case *syntax.CmdSubst, *syntax.ProcSubst:
				// A new quoting context, walked on its own.
				return false
			case *syntax.SglQuoted:
				// $'...' is refused in every context by expansionWords.
				if !n.Dollar && strings.ContainsAny(n.Value, "$`") {
					c.note(source(pe), v1alpha1.CategoryUnknown, reasonQuotesInExpansion)
					return false
				}
			}
			return true
		})
	}
}

// expansionWords refuses what bash runs inside a ${...} expansion's words and the
// parser reads as text, in every quoting context:
//   - a process substitution: the parser reads ${x:-<(cmd)} and "${x,<(cmd)}" as
//     the literal text "<(cmd)", bash runs cmd;
//   - $'...' holding an escape, a $ or a backquote: bash decodes it and, inside
//     double quotes, expands the result ("${x:-$'\x24(cmd)'}" runs cmd), and so
//     also inside a command substitution inside double quotes, where the
//     expansion itself is not quoted ("$(: ${x:-$'\x24(cmd)'})").
//
// Expansions nested in p are checked on their own; substitutions are walked on their
// own.
func (c *classifier) expansionWords(p *syntax.ParamExp) {
	if !hasWords(p) {
		return
	}
	syntax.Walk(p, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			return false
		case *syntax.ParamExp:
			return n == p
		case *syntax.Lit:
			if strings.Contains(n.Value, "<(") || strings.Contains(n.Value, ">(") {
				c.note(source(p), v1alpha1.CategoryUnknown, reasonProcessInExpansion)
			}
		case *syntax.SglQuoted:
			if n.Dollar && strings.ContainsAny(n.Value, "\\$`") {
				c.note(source(p), v1alpha1.CategoryUnknown, reasonDollarQuoteInExpansion)
			}
		}
		return true
	})
}

// comment refuses a comment that ends in a backslash: bash ends every comment at the
// newline, while the parser takes the backslash and newline for a line continuation
// and reads the next line as more of the command before the comment, so that
// "echo a # \" followed by "touch x" is one echo to it and runs touch in bash.
func (c *classifier) comment(n *syntax.Comment) {
	if strings.HasSuffix(n.Text, "\\\n") {
		c.note("#"+strings.TrimSuffix(n.Text, "\\\n"), v1alpha1.CategoryUnknown, reasonCommentBackslash)
	}
}
