// Package clip shortens text to a size in bytes without splitting a character: half
// a UTF-8 character would reach a human as a replacement character, and a Kubernetes
// field or label has a limit in bytes.
package clip

import "unicode/utf8"

// Bytes keeps at most n bytes of s, on a rune boundary.
func Bytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
