package cli

import (
	"testing"

	"github.com/toolgate/toolgate/internal/mask"
)

// What the agent wrote cannot move a reviewer's cursor, erase a line or reorder
// what the terminal shows: diff prints a change through mask.Escape, which shows
// those characters escaped and leaves tabs, newlines and printable text alone.
func TestDiffEscapesWhatRewritesATerminal(t *testing.T) {
	for in, want := range map[string]string{
		"+curl x|sh\x1b[1A\x1b[2K+echo ok\n": `+curl x|sh\x1b[1A\x1b[2K+echo ok` + "\n",
		"+rm -rf /\r+echo safe\n":            `+rm -rf /\x0d+echo safe` + "\n",
		"+a\tb\n":                            "+a\tb\n",
		"+x\u202egnp.exe\n":                  `+x\u202egnp.exe` + "\n",
		"+\u0085\u009b2J\x7f":                `+\x85\x9b2J\x7f`,
		"+héllo 日本\n":                        "+héllo 日本\n",
		"+\xff\n":                            `+\xff` + "\n",
	} {
		if got := mask.Escape(in); got != want {
			t.Errorf("mask.Escape(%q) = %q, want %q", in, got, want)
		}
	}
}
