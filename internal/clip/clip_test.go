package clip

import (
	"testing"
	"unicode/utf8"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc"},
		{"héllo", 2, "h"}, // é is two bytes: not split
		{"héllo", 3, "hé"},
		{"日本語", 4, "日"},
		{"日本語", 0, ""},
	} {
		got := Bytes(tc.s, tc.n)
		if got != tc.want || !utf8.ValidString(got) || len(got) > tc.n && tc.s != got {
			t.Errorf("Bytes(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
