package mask

import (
	"strings"
	"unicode/utf8"
)

// A view is a text derived from the one to mask, in which detection runs, with
// the offset in the original text of each of its bytes; what is found in the view
// is masked in the original. Two views undo what would hide a secret from a
// detector that reads the text as it is:
//   - clean drops terminal escape sequences (ANSI colours, cursor moves, OSC
//     titles) and the invisible characters Escape writes visibly, so
//     AKIA<ESC>[0mLALEM… is one token again;
//   - joined puts together short runs of lines that are all token characters, so
//     a token wrapped over two or three lines (a terminal, base64 -w) is one line.
type view struct {
	// src is the original text.
	src  string
	text string
	// orig[i] is the offset in the original text of text[i]; nil when text is
	// the original.
	orig []int
	// unescaped views decoded escapes: a byte of text can stand for several of
	// the original.
	unescaped bool
}

// toOriginal maps sp, found in v, to the original text. A span whose bytes are
// not contiguous there (a dropped escape inside it, or lines joined) becomes one
// span per original line it touches, so masking keeps the original's lines.
func (v view) toOriginal(sp span) []span {
	if v.orig == nil {
		return []span{sp}
	}
	var out []span
	cur := sp
	cur.start, cur.end = v.orig[sp.start], v.next(sp.start)
	for i := sp.start + 1; i < sp.end; i++ {
		o := v.orig[i]
		if o > cur.end && v.lineBreakBetween(cur.end, o) {
			out = append(out, cur)
			cur.start = o
		}
		cur.end = max(cur.end, v.next(i))
	}
	return append(out, cur)
}

// next is the offset in the original text right after what view byte i stands
// for: one byte, or a whole escape (\" or \u0067) when the view decoded one.
func (v view) next(i int) int {
	o := v.orig[i]
	switch {
	case !v.unescaped || v.src[o] != '\\' || o+1 >= len(v.src):
		return o + 1
	case v.src[o+1] == 'u':
		return o + 6
	}
	return o + 2
}

// lineBreakBetween reports whether the original text has a newline in [from, to).
func (v view) lineBreakBetween(from, to int) bool {
	return from < to && strings.IndexByte(v.src[from:to], '\n') >= 0
}

// cleanView drops terminal escape sequences and hidden characters from s; it is
// s itself when it has none.
func cleanView(s string) view {
	if !strings.ContainsRune(s, 0x1b) && !needsEscape(s) {
		return view{src: s, text: s}
	}
	var b strings.Builder
	orig := make([]int, 0, len(s))
	keep := func(from, to int) {
		b.WriteString(s[from:to])
		for i := from; i < to; i++ {
			orig = append(orig, i)
		}
	}
	for i := 0; i < len(s); {
		if s[i] == 0x1b {
			i += escapeSequenceLen(s[i:])
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r != utf8.RuneError || size != 1) && hidden(r) {
			i += size
			continue
		}
		keep(i, i+size)
		i += size
	}
	return view{src: s, text: b.String(), orig: orig}
}

// tokenByte reports the characters of a token and of base64 text.
func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=' || c == '_' || c == '.' || c == '-'
}

// trailingToken returns where the token characters that end line start.
func trailingToken(line string) int {
	i := len(line)
	for i > 0 && tokenByte(line[i-1]) {
		i--
	}
	return i
}

const (
	// minWrapped is the length a line must have to be taken for a wrapped one.
	minWrapped = 16
	// maxJoined is the most lines joined: a token wraps over two or three lines
	// of a terminal; a longer run is a blob (a certificate, an image in base64).
	maxJoined = 8
)

// joinedViews returns a view for each run of lines where a token may continue
// on the next line: a line that ends in a token of at least eight characters and is
// at least minWrapped long, followed by lines of token characters only, all but the
// last as long as the first of them (wrapped at one width). A run longer than
// maxJoined lines is left.
func joinedViews(s string) []view {
	if !strings.Contains(s, "\n") {
		return nil
	}
	type piece struct{ start, end int }
	var views []view
	var run []piece
	prevLen, wrapLen := 0, 0
	flush := func() {
		if len(run) >= 2 && len(run) <= maxJoined {
			var b strings.Builder
			var orig []int
			for _, p := range run {
				b.WriteString(s[p.start:p.end])
				for i := p.start; i < p.end; i++ {
					orig = append(orig, i)
				}
			}
			views = append(views, view{src: s, text: b.String(), orig: orig})
		}
		run = run[:0]
	}
	for start := 0; start < len(s); {
		end := strings.IndexByte(s[start:], '\n')
		if end < 0 {
			end = len(s)
		} else {
			end += start
		}
		line := s[start:end]
		trimmed := strings.TrimRight(line, " \t\r")
		indent := len(trimmed) - len(strings.TrimLeft(trimmed, " \t"))
		tokenStart := trailingToken(trimmed)
		switch {
		case len(run) > 0 && prevLen >= minWrapped && (len(run) == 1 || prevLen == wrapLen) && tokenStart == indent && indent < len(trimmed):
			// Lines wrapped at a width are all that long but the last.
			if len(run) == 1 {
				wrapLen = len(trimmed)
			}
			run = append(run, piece{start + indent, start + len(trimmed)})
		default:
			flush()
			if len(trimmed) >= minWrapped && len(trimmed)-tokenStart >= 8 {
				run = append(run, piece{start + tokenStart, start + len(trimmed)})
			}
		}
		prevLen = len(trimmed)
		start = end + 1
	}
	flush()
	return views
}

// escapeSequenceLen is the length of the terminal escape sequence at the start of
// s (which starts with ESC): CSI (ESC [ … final byte), OSC (ESC ] … BEL or ESC \),
// or ESC and one more byte.
func escapeSequenceLen(s string) int {
	if len(s) < 2 {
		return len(s)
	}
	switch s[1] {
	case '[':
		for i := 2; i < len(s); i++ {
			if s[i] >= 0x40 && s[i] <= 0x7e {
				return i + 1
			}
		}
		return len(s)
	case ']':
		for i := 2; i < len(s); i++ {
			if s[i] == 0x07 {
				return i + 1
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
		}
		return len(s)
	}
	return 2
}

// unescapedView undoes the escapes of a JSON (or Go, or JavaScript) string in s:
// \" \\ \/ \n \r \t \b \f and \uXXXX. A tool call's input is JSON, and so is much of
// what tools print; inside a JSON string a secret's quotes are \", which ends no
// value for gitleaks' rules, so "password":\"hunter22\" would pass unseen. A
// decoded byte maps to the start of its escape; a quote that is not escaped (a
// string's own) becomes a space. It returns false when s has no such escape.
func unescapedView(s string) (view, bool) {
	if !strings.Contains(s, `\`) {
		return view{}, false
	}
	var b strings.Builder
	orig := make([]int, 0, len(s))
	found := false
	for i := 0; i < len(s); {
		if s[i] == '\\' && i+1 < len(s) {
			var decoded string
			size := 2
			switch c := s[i+1]; c {
			case '"', '\\', '/':
				decoded = string(c)
			case 'n':
				decoded = "\n"
			case 'r':
				decoded = "\r"
			case 't':
				decoded = "\t"
			case 'b', 'f':
				decoded = " "
			case 'u':
				if r, ok := hexRune(s[i+2:]); ok {
					decoded, size = string(r), 6
				}
			}
			if decoded != "" {
				found = true
				b.WriteString(decoded)
				for range len(decoded) {
					orig = append(orig, i)
				}
				i += size
				continue
			}
		}
		c := s[i]
		if c == '"' {
			// A string's own quote is not part of what it holds: a space,
			// as gitleaks' rules end a value at the end of its line or at a
			// space (curl -u user:password"} would run into the brace).
			c = ' '
		}
		b.WriteByte(c)
		orig = append(orig, i)
		i++
	}
	if !found {
		return view{}, false
	}
	return view{src: s, text: b.String(), orig: orig, unescaped: true}, true
}

// hexRune reads the four hex digits of a \u escape at the start of s.
func hexRune(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[:4]) {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
