package unidiff

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestDiffStats(t *testing.T) {
	for _, tc := range []struct {
		name           string
		old, new       string
		added, removed int
	}{
		{name: "same", old: "a\nb\n", new: "a\nb\n"},
		{name: "new file", old: "", new: "a\nb\n", added: 2},
		{name: "emptied", old: "a\nb\n", new: "", removed: 2},
		{name: "one line changed", old: "a\nb\nc\n", new: "a\nB\nc\n", added: 1, removed: 1},
		{name: "insert in the middle", old: "a\nc\n", new: "a\nb\nc\n", added: 1},
		{name: "final newline added", old: "a\nb", new: "a\nb\n", added: 1, removed: 1},
		{name: "moved line", old: "a\nb\nc\n", new: "b\nc\na\n", added: 1, removed: 1},
		{name: "no newline at all", old: "x", new: "y", added: 1, removed: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			added, removed := DiffStats([]byte(tc.old), []byte(tc.new))
			if added != tc.added || removed != tc.removed {
				t.Fatalf("+%d -%d, want +%d -%d", added, removed, tc.added, tc.removed)
			}
		})
	}
}

func TestUnifiedDiff(t *testing.T) {
	lines := func(n int, change map[int]string) string {
		var sb strings.Builder
		for i := 1; i <= n; i++ {
			if s, ok := change[i]; ok {
				sb.WriteString(s)
				continue
			}
			sb.WriteString("l" + itoa(i) + "\n")
		}
		return sb.String()
	}
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{name: "equal", old: "a\n", new: "a\n", want: ""},
		{name: "new file", old: "", new: "a\nb\n", want: "--- a/f\n+++ b/f\n@@ -0,0 +1,2 @@\n+a\n+b\n"},
		{name: "no final newline", old: "a\nb", new: "a\nc", want: "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"},
		{
			name: "two far changes make two hunks",
			old:  lines(20, nil),
			new:  lines(20, map[int]string{2: "X\n", 18: "Y\n"}),
			want: "--- a/f\n+++ b/f\n@@ -1,5 +1,5 @@\n l1\n-l2\n+X\n l3\n l4\n l5\n@@ -15,6 +15,6 @@\n l15\n l16\n l17\n-l18\n+Y\n l19\n l20\n",
		},
		{
			name: "close changes share a hunk",
			old:  lines(12, nil),
			new:  lines(12, map[int]string{3: "X\n", 9: ""}),
			want: "--- a/f\n+++ b/f\n@@ -1,12 +1,11 @@\n l1\n l2\n-l3\n+X\n l4\n l5\n l6\n l7\n l8\n-l9\n l10\n l11\n l12\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, _ := UnifiedDiff("f", []byte(tc.old), []byte(tc.new))
			if got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// lcs is the textbook dynamic program: the shortest edit script has
// len(a)+len(b)-2*lcs edits.
func lcs(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}

func TestDiffLinesIsAShortestCorrectScript(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randomLines := func() []string {
		n := rng.IntN(30)
		out := make([]string, n)
		for i := range out {
			out[i] = string(rune('a'+rng.IntN(4))) + "\n"
		}
		return out
	}
	for range 500 {
		a, b := randomLines(), randomLines()
		ops := diffLines(a, b)
		var gotA, gotB []string
		edits := 0
		for _, op := range ops {
			if op.kind != opInsert {
				gotA = append(gotA, op.text)
			}
			if op.kind != opDelete {
				gotB = append(gotB, op.text)
			}
			if op.kind != opEqual {
				edits++
			}
		}
		if strings.Join(gotA, "") != strings.Join(a, "") || strings.Join(gotB, "") != strings.Join(b, "") {
			t.Fatalf("script does not turn %q into %q: %v", a, b, ops)
		}
		if want := len(a) + len(b) - 2*lcs(a, b); edits != want {
			t.Fatalf("%d edits from %q to %q, shortest is %d", edits, a, b, want)
		}
	}
}

func TestDiffPastTheEditBoundStaysCorrect(t *testing.T) {
	var a, b []string
	for i := range 3 * maxDiffEdits {
		a = append(a, "a"+itoa(i)+"\n")
		b = append(b, "b"+itoa(i)+"\n")
	}
	a = append(a, "same\n")
	b = append(b, "same\n")
	added, removed := DiffStats([]byte(strings.Join(a, "")), []byte(strings.Join(b, "")))
	if added != 3*maxDiffEdits || removed != 3*maxDiffEdits {
		t.Fatalf("+%d -%d", added, removed)
	}
}
