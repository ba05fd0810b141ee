package policy

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// harmlessSinks are redirection targets that keep nothing.
var harmlessSinks = set("/dev/null", "/dev/stdout", "/dev/stderr")

func (c *classifier) redirect(r *syntax.Redirect) {
	if r.N != nil && strings.HasPrefix(r.N.Value, "{") {
		// {name}>file stores the descriptor's number in the variable name.
		name := strings.TrimSuffix(strings.TrimPrefix(r.N.Value, "{"), "}")
		if !variableName.MatchString(name) {
			c.note("redirect "+r.N.Value, v1alpha1.CategoryUnknown, "a {name} redirection with a subscript evaluates it as arithmetic")
		} else {
			c.binds(name, false)
		}
	}
	if r.Word == nil {
		return
	}
	target := wordOf(r.Word)
	text := "redirect " + r.Op.String() + " " + target.text
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		// The body is data; substitutions inside it are walked like any other word.
		return
	case syntax.DplIn, syntax.DplOut:
		// >&2, <&0, >&- duplicate or close descriptors; bash treats >&word with any
		// other word as a redirection to a file.
		if target.static && (target.text == "-" || isDigits(target.text)) {
			return
		}
	}
	if !target.static || target.split {
		c.note(text, v1alpha1.CategoryUnknown, "the target of the redirection is known only when the command runs")
		return
	}
	if clean := path.Clean(target.text); strings.HasPrefix(clean, "/dev/tcp/") || strings.HasPrefix(clean, "/dev/udp/") {
		c.note(text, v1alpha1.CategoryNetwork, "bash opens a network connection for /dev/tcp and /dev/udp")
		return
	}
	if r.Op == syntax.RdrIn || harmlessSinks[target.text] {
		c.note(text, v1alpha1.CategoryReadOnly, "")
		return
	}
	c.note(text, v1alpha1.CategoryWrite, "")
}

// heredoc refuses a here-document whose end bash could find elsewhere than the
// parser, which would make a command bash runs read as data:
//   - an unquoted one whose body continues a line with a backslash: bash joins
//     such lines before it compares a line with the delimiter, so "EO\" and "F"
//     end the body there (the parser does not join them);
//   - one with a body line that starts with the delimiter: inside $( ), <( ) or
//     backquotes bash ends the body at "EOF)" together with the substitution,
//     where the parser reads on to a plain "EOF".
//
// src is the text r was parsed from.
func (c *classifier) heredoc(r *syntax.Redirect, src string) {
	if r.Word == nil {
		return
	}
	delimiter, quoted := wordOf(r.Word), false
	for _, part := range r.Word.Parts {
		if lit, isLit := part.(*syntax.Lit); !isLit || strings.Contains(lit.Value, "\\") {
			quoted = true
		}
	}
	text := "here-document " + r.Op.String() + delimiter.text
	if !delimiter.static || delimiter.text == "" {
		c.note(text, v1alpha1.CategoryUnknown, "a here-document's delimiter must be a plain word: bash and the parser could end the body at different lines")
		return
	}
	if r.Hdoc == nil {
		return
	}
	if !quoted {
		// An unquoted body is expanded as if it were in double quotes.
		c.quotedInExpansion(r.Hdoc.Parts)
	}
	start, end := int(r.Hdoc.Pos().Offset()), int(r.Hdoc.End().Offset())
	if start < 0 || end > len(src) || start > end {
		c.note(text, v1alpha1.CategoryUnknown, "the here-document's body could not be located in the command")
		return
	}
	body := src[start:end]
	if !quoted && strings.Contains(body, "\\\n") {
		c.note(text, v1alpha1.CategoryUnknown, "a line of this here-document ends with a backslash: bash joins it with the next line before it looks for the delimiter, so the body could end elsewhere than it appears to; quote the delimiter (<<'"+delimiter.text+"') to keep the text as it is")
		return
	}
	lines := strings.Split(body, "\n")
	for i, line := range lines {
		if r.Op == syntax.DashHdoc {
			line = strings.TrimLeft(line, "\t")
		}
		if i == len(lines)-1 && line == delimiter.text {
			break // the line that ends the body (the parser's span includes it)
		}
		// A longer word (EOFError under <<EOF) is text to bash too; the
		// delimiter followed by anything else (")", "`", a space) may end it.
		if rest, found := strings.CutPrefix(line, delimiter.text); found && (rest == "" || !isWordByte(rest[0])) {
			c.note(text, v1alpha1.CategoryUnknown, fmt.Sprintf("a line of this here-document starts with its delimiter %q: inside a substitution bash could end the body there; choose a delimiter the text does not contain", delimiter.text))
			return
		}
	}
}
