package policy

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// sedScriptProblem reads a sed script the way GNU sed does and says what in it is
// not read-only; "" means every command only prints or edits the stream. This is an
// allowlist: e (run a command), w and W (write a file), r and R (read one into the
// output), the e and w flags of s, and anything this reader does not understand are
// problems.
func sedScriptProblem(script string) string {
	r := &sedReader{s: script}
	for {
		r.skip(" \t\n;")
		if r.done() {
			return ""
		}
		if r.peek() == '#' {
			r.line()
			continue
		}
		if problem := r.address(); problem != "" {
			return problem
		}
		r.skip(" \t")
		if r.peek() == ',' {
			r.next()
			r.skip(" \t")
			if problem := r.address(); problem != "" {
				return problem
			}
			r.skip(" \t")
		}
		for r.peek() == '!' {
			r.next()
			r.skip(" \t")
		}
		if r.done() {
			return "a sed address without a command"
		}
		cmd := r.next()
		switch cmd {
		case '{', '}', '=', 'd', 'D', 'g', 'G', 'h', 'H', 'n', 'N', 'p', 'P', 'x', 'z', 'F':
		case 'q', 'Q', 'l', 'L':
			r.skip(" \t")
			r.digits()
		case ':', 'b', 't', 'T':
			// sed versions end a label differently (GNU sed 4.9 at ';' or a blank,
			// older ones at the end of the line), so a label is a plain word and
			// what follows it on the line must start a new command.
			r.skip(" \t")
			start := r.pos
			for !r.done() && strings.IndexByte("; \t\n}", r.peek()) < 0 {
				r.next()
			}
			if cmd == ':' && r.pos == start {
				return "a sed label without a name"
			}
			r.skip(" \t")
			if !r.done() && r.peek() != ';' && r.peek() != '\n' && r.peek() != '}' {
				return "a sed label followed by more than a ';' or a new line: sed versions read it differently"
			}
			if cmd == ':' && r.peek() == '}' {
				return "a sed label followed by '}': sed versions read it differently"
			}
		case 'a', 'i', 'c':
			// Text to the end of the line; a backslash-newline continues it.
			for !r.done() && r.peek() != '\n' {
				if r.next() == '\\' && !r.done() {
					r.next()
				}
			}
		case 'y':
			if problem := r.fields(); problem != "" {
				return problem
			}
		case 's':
			if problem := r.fields(); problem != "" {
				return problem
			}
			if problem := r.flags(); problem != "" {
				return problem
			}
		case 'e':
			return "the sed command e runs a shell command"
		case 'w', 'W':
			return fmt.Sprintf("the sed command %c writes a file", cmd)
		case 'r', 'R':
			return fmt.Sprintf("the sed command %c reads a file toolgate does not check", cmd)
		default:
			return fmt.Sprintf("toolgate does not know the sed command %q", cmd)
		}
	}
}

type sedReader struct {
	s   string
	pos int
	// delim is the delimiter of the s or y command being read.
	delim byte
}

func (r *sedReader) done() bool { return r.pos >= len(r.s) }
func (r *sedReader) peek() byte {
	if r.done() {
		return 0
	}
	return r.s[r.pos]
}
func (r *sedReader) next() byte { b := r.peek(); r.pos++; return b }
func (r *sedReader) skip(chars string) {
	for !r.done() && strings.IndexByte(chars, r.peek()) >= 0 {
		r.pos++
	}
}
func (r *sedReader) line() {
	for !r.done() && r.peek() != '\n' {
		r.pos++
	}
}
func (r *sedReader) digits() {
	for !r.done() && r.peek() >= '0' && r.peek() <= '9' {
		r.pos++
	}
}

// address reads one address: N, first~step, $, /re/, \cREc, +N, ~N, with the I and M
// flags after a regular expression.
func (r *sedReader) address() string {
	switch b := r.peek(); {
	case b >= '0' && b <= '9':
		r.digits()
		if r.peek() == '~' {
			r.next()
			r.digits()
		}
	case b == '$':
		r.next()
	case b == '+' || b == '~':
		r.next()
		r.digits()
	case b == '/' || b == '\\':
		if b == '\\' {
			r.next()
			if r.done() || r.peek() == '\n' || r.peek() == '\\' {
				return "a sed address with a missing delimiter"
			}
		}
		r.delim = r.next()
		if problem := r.until(); problem != "" {
			return problem
		}
		for r.peek() == 'I' || r.peek() == 'M' {
			r.next()
		}
	}
	return ""
}

// until reads to the unescaped delimiter, which GNU sed finds by backslashes alone
// (a delimiter inside [...] still ends the expression).
func (r *sedReader) until() string {
	for !r.done() {
		b := r.next()
		switch b {
		case '\\':
			if r.done() {
				return "a sed expression ends in a backslash"
			}
			r.next()
		case r.delim:
			return ""
		case '\n':
			if r.delim != '\n' {
				return "a sed expression is not terminated"
			}
		}
	}
	return "a sed expression is not terminated"
}

// fields reads the delimiter of s or y and its two delimited fields.
func (r *sedReader) fields() string {
	if r.done() || r.peek() == '\\' || r.peek() == '\n' {
		return "a sed command with a bad delimiter"
	}
	r.delim = r.next()
	if problem := r.until(); problem != "" {
		return problem
	}
	return r.until()
}

// flags reads the flags of s: the e flag runs the pattern space as a command and w
// writes a file.
func (r *sedReader) flags() string {
	for !r.done() {
		switch b := r.peek(); {
		case b == 'g' || b == 'p' || b == 'i' || b == 'I' || b == 'm' || b == 'M' || b >= '0' && b <= '9':
			r.next()
		case b == 'e':
			return "the e flag of sed's s command runs the result as a shell command"
		case b == 'w' || b == 'W':
			return "the w flag of sed's s command writes a file"
		case b == ' ' || b == '\t':
			// GNU sed skips blanks between flags: s/a/b/ ie is the flags i and e.
			r.next()
		case b == ';' || b == '\n' || b == '}' || b == '#':
			return ""
		default:
			return fmt.Sprintf("toolgate does not know the s flag %q", b)
		}
	}
	return ""
}

var sedGrammar = &grammar{
	order:    permutes,
	short:    "nrsuzEe:f:l:i::",
	long:     "quiet silent debug expression= file= follow-symlinks in-place[=] line-length= null-data zero-terminated posix regexp-extended separate sandbox unbuffered",
	complete: true,
	effects: map[string]v1alpha1.CommandCategory{
		"i": v1alpha1.CategoryWrite, "in-place": v1alpha1.CategoryWrite,
		// A script file is not read here.
		"f": v1alpha1.CategoryUnknown, "file": v1alpha1.CategoryUnknown,
	},
}

// sed is read-only when its script uses only commands that print or edit the
// stream (see sedScriptReadOnly).
func sed(c *classifier, w []word, _ int) {
	p := sedGrammar.parse(w[1:])
	if p.category != v1alpha1.CategoryReadOnly {
		c.addWithReason(w, p.category, p.reason)
		return
	}
	var scripts []word
	for _, o := range p.options {
		if o.name == "e" || o.name == "expression" {
			scripts = append(scripts, word{text: o.value, static: true})
		}
	}
	if len(scripts) == 0 {
		if len(p.operands) == 0 {
			c.add(w, v1alpha1.CategoryReadOnly)
			return
		}
		scripts = p.operands[:1]
	}
	for _, s := range scripts {
		if !s.static {
			c.addWithReason(w, v1alpha1.CategoryUnknown, "the sed script is known only when it runs")
			return
		}
		if problem := sedScriptProblem(s.text); problem != "" {
			c.addWithReason(w, v1alpha1.CategoryUnknown, problem)
			return
		}
	}
	c.add(w, v1alpha1.CategoryReadOnly)
}
