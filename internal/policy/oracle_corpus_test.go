package policy

import (
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// TestCorpusDangerousNeverReadOnly: no dangerous line of the corpus, noexec ones
// included, may be classified read-only.
func TestCorpusDangerousNeverReadOnly(t *testing.T) {
	lines := oracleLoadCorpus(t, "dangerous.txt")
	if len(lines) < 150 {
		t.Fatalf("the dangerous corpus has %d lines, want at least 150", len(lines))
	}
	bad := 0
	for _, c := range lines {
		if got := ClassifyCommand(c.command); got.Category == v1alpha1.CategoryReadOnly {
			bad++
			t.Errorf("%s: dangerous, classified %s", c, oracleDescribe(got))
		}
	}
	if bad > 0 {
		t.Logf("%d of %d dangerous lines classified read-only", bad, len(lines))
	}
}

// TestCorpusSafeReadOnly: at most one safe line in twenty may be refused (classified
// anything but read-only); every refused one is reported.
func TestCorpusSafeReadOnly(t *testing.T) {
	lines := oracleLoadCorpus(t, "safe.txt")
	if len(lines) < 60 {
		t.Fatalf("the safe corpus has %d lines, want at least 60", len(lines))
	}
	var refused []string
	for _, c := range lines {
		if got := ClassifyCommand(c.command); got.Category != v1alpha1.CategoryReadOnly {
			refused = append(refused, c.String()+": "+oracleDescribe(got))
		}
	}
	for _, r := range refused {
		t.Logf("refused: %s", r)
	}
	if len(refused)*20 > len(lines) {
		t.Errorf("%d of %d safe lines refused, more than one in twenty", len(refused), len(lines))
	}
}

// TestOracleReadOnlyCorpus: every corpus line (safe or dangerous) the classifier calls
// read-only must leave no trace when bash really runs it in the sandbox.
func TestOracleReadOnlyCorpus(t *testing.T) {
	runs := oracleRunCorpus(t)
	checked := 0
	for _, file := range []string{"safe.txt", "dangerous.txt"} {
		for _, run := range runs[file] {
			got := ClassifyCommand(run.line.command)
			if got.Category != v1alpha1.CategoryReadOnly {
				continue
			}
			checked++
			if len(run.result.violations) > 0 {
				t.Errorf("%s: classified %s, yet in the sandbox it left traces: %s", run.line, oracleDescribe(got), run.result)
			}
		}
	}
	t.Logf("%d read-only corpus commands checked in the sandbox", checked)
}
