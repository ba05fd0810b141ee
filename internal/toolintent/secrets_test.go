package toolintent

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/mask/masktest"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// TestEverySecretIsMaskedInEventsAndConditions: every fake secret of the corpus
// (gitleaks' own true positives, toolgate's own cases) is masked in an intent's
// event notes and condition messages.
func TestEverySecretIsMaskedInEventsAndConditions(t *testing.T) {
	corpus, err := masktest.Corpus(mask.Rules(), 3)
	if err != nil {
		t.Fatal(err)
	}
	intent := fixtures.ToolIntent("ns", "t", 1, 0, "bash", `{"command":"make"}`, "agent")
	for _, f := range corpus {
		for where, text := range map[string]string{
			"event":     event("Observed", true, nil, "the call failed: %s", f.Text).Note,
			"condition": Condition(intent, "Executed", false, "Failed", f.Text).Message,
		} {
			if !strings.Contains(text, mask.Masked) || mask.Secrets(text) != text {
				t.Errorf("%s: the secret of %q is not masked in the %s: %q", f.Rule, f.Text, where, text)
			}
		}
	}
}
