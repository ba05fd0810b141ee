package mask

import (
	"strings"
	"testing"
)

// TestSecretsShowWhatRuns: masking replaces secret values, never a command in a
// secret's place, so the person approving a call sees every part of it.
func TestSecretsShowWhatRuns(t *testing.T) {
	cases := []struct {
		in, want string
	}{
		{"echo password=$(cat /etc/shadow)", "echo password=$(cat /etc/shadow)"},
		{"curl -H token=`cat ~/.token` x", "curl -H token=`cat ~/.token` x"},
		{"echo secret=${SECRET}", "echo secret=${SECRET}"},
		{"tool --password <(cat key)", "tool --password <(cat key)"},
		{"echo password=hunter22$(id)", "echo password=" + Masked + "$(id)"},
		{"echo password=hunter22", "echo password=" + Masked},
		{"tool --api-key zzzzyyyyxxxx run", "tool --api-key " + Masked + " run"},
	}
	for _, tc := range cases {
		if got := Secrets(tc.in); got != tc.want {
			t.Errorf("Secrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestEscapeWhatATerminalWouldHide: control characters, bidirectional overrides and
// invisible formatting reach a terminal as visible escapes, so text cannot rewrite
// what an approver reads; newlines and tabs stay.
func TestEscapeWhatATerminalWouldHide(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"plain", "go test ./...\n\tok", "go test ./...\n\tok"},
		{"ANSI clear screen", "ls\x1b[2J\x1b[Hrm -rf /", `ls\x1b[2J\x1b[Hrm -rf /`},
		{"carriage return rewriting the line", "rm -rf /\rls       ", `rm -rf /\x0dls       `},
		{"right-to-left override", "cat \u202efdp.txt", `cat \u202efdp.txt`},
		{"isolates", "a\u2066b\u2069c", `a\u2066b\u2069c`},
		{"zero-width space", "r\u200bm", `r\u200bm`},
		{"byte order mark", "\ufeffls", `\ufeffls`},
		{"C1 control", "a\u009bb", `a\x9bb`},
		{"invalid UTF-8", "a\xffb", `a\xffb`},
		{"ordinary non-ASCII", "café ✓ 日本", "café ✓ 日本"},
	}
	for _, tc := range cases {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("%s: Escape(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
		if got := Secrets(tc.in); !strings.Contains(got, tc.want) {
			t.Errorf("%s: Secrets(%q) = %q does not escape like Escape", tc.name, tc.in, got)
		}
	}
}
