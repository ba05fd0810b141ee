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

// TestCommandShowsValuesThatRun: in a call's input shown to its approver, a value
// after a secret-looking name is masked only when nothing in the call can use it as
// code or as an argument. Each case hides a program, a flag or a target behind a
// secret's name; the last ones are secrets that are only assigned, and stay masked.
func TestCommandShowsValuesThatRun(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"the program in a variable", `{"command":"run_token=uname; $run_token -a"}`, `{"command":"run_token=uname; $run_token -a"}`},
		{"braced", "x_secret=rm; ${x_secret} -rf /", "x_secret=rm; ${x_secret} -rf /"},
		{"a flag", "password=-rf; rm $password /", "password=-rf; rm $password /"},
		{"the target", "p_token=/; rm -rf $p_token", "p_token=/; rm -rf $p_token"},
		{"arithmetic, no dollar", "n_secret=3; echo $((n_secret + 1))", "n_secret=3; echo $((n_secret + 1))"},
		{"an indirect reference", "run_token=uname; ref=run_token; ${!ref} -a", "run_token=uname; ref=run_token; ${!ref} -a"},
		{"a nameref", "run_token=uname; declare -n r=run_token; $r", "run_token=uname; declare -n r=run_token; $r"},
		{"eval of a built name", `run_token=uname; eval "\$run""_token -a"`, `run_token=uname; eval "\$run""_token -a"`},
		{"exported, read by a child", "export run_token=uname; printenv | sed -n s/^run_t.*=//p | sh", "export run_token=uname; printenv | sed -n s/^run_t.*=//p | sh"},
		{"sourced", "api_key=uname; . ./script", "api_key=uname; . ./script"},
		{"only assigned", "PASSWORD=hunter22 mysql -u root db", "PASSWORD=" + Masked + " mysql -u root db"},
		{"a flag value", "mysql --password=hunter22 db", "mysql --password=" + Masked + " db"},
		{"a token shape is masked even when used", "k=sk-abcdefghijklmnop; curl -H \"x: $k\"", "k=" + Masked + "; curl -H \"x: $k\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Command(tc.in); got != tc.want {
				t.Errorf("Command(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	// Secrets, for what is not a call (output, reasons), masks them all.
	if got := Secrets("run_token=uname; $run_token -a"); got != "run_token="+Masked+"; $run_token -a" {
		t.Errorf("Secrets masks a value used later: %q", got)
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
