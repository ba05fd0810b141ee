package mask

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape writes the characters that change what a terminal or an editor shows
// (control, bidirectional and invisible formatting characters, invalid UTF-8) as
// visible escapes, and leaves everything else, newlines and tabs included.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case hidden(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			for _, r := range s {
				if r == utf8.RuneError || hidden(r) {
					return true
				}
			}
			return !utf8.ValidString(s)
		}
	}
	return false
}

// hidden reports the characters that change how the text around them is shown.
func hidden(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return true
	case r == 0x061c || r == 0x180e || r == 0xfeff:
		return true
	case r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2060 && r <= 0x206f:
		return true
	}
	return false
}
