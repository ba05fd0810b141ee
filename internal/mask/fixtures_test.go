package mask

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/mask/masktest"
)

// TestGitleaksFixturesAreMasked: every true positive gitleaks' own rules are
// validated with is masked by Secrets, and what is left holds nothing gitleaks
// finds.
func TestGitleaksFixturesAreMasked(t *testing.T) {
	inDefault := map[string]bool{}
	for _, id := range Rules() {
		inDefault[id] = true
	}
	if len(inDefault) < 200 {
		t.Fatalf("gitleaks' default configuration has %d rules; did it load?", len(inDefault))
	}
	all, skipped, err := masktest.GitleaksFixtures()
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) > 0 {
		t.Logf("rules whose true positives are not plain lists, left out: %v", skipped)
	}
	var fixtures []masktest.Fixture
	rules := map[string]bool{}
	notDefault := map[string]bool{}
	for _, f := range all {
		if !inDefault[f.Rule] {
			// A rule gitleaks keeps in its sources but not in its default
			// configuration.
			notDefault[f.Rule] = true
			continue
		}
		fixtures = append(fixtures, f)
		rules[f.Rule] = true
	}
	if len(notDefault) > 0 {
		t.Logf("rules not in gitleaks' default configuration, left out: %v", notDefault)
	}
	if len(rules) < 150 {
		t.Fatalf("read true positives of %d rules only; gitleaks' sources changed shape?", len(rules))
	}
	t.Logf("%d true positives of %d rules", len(fixtures), len(rules))
	missed := map[string]int{}
	for _, f := range fixtures {
		out, found := Find(f.Text)
		if !strings.Contains(out, Masked) || len(found) == 0 {
			missed[f.Rule]++
			if missed[f.Rule] == 1 {
				t.Errorf("%s: nothing masked in %q", f.Rule, f.Text)
			}
			continue
		}
		if left := detectSecrets(out); len(left) > 0 {
			t.Errorf("%s: %q masked as %q still holds %s", f.Rule, f.Text, out, out[left[0].start:left[0].end])
		}
	}
	if len(missed) > 0 {
		t.Errorf("rules with true positives left unmasked (count): %v", missed)
	}
}
