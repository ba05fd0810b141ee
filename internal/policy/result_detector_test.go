package policy

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
)

// TestRedactSecretsFindsProviderTokens: secrets: true is the maintained detector
// (gitleaks' rules, through package mask), which finds provider tokens toolgate's
// earlier hand-written patterns missed.
func TestRedactSecretsFindsProviderTokens(t *testing.T) {
	rule := resultRule("detector", v1alpha1.RuleRedact, "")
	rule.Redact = &v1alpha1.RedactSpec{Secrets: true}
	p := mustCompile(t, KindToolPolicy, "p", rule)
	for _, secret := range []string{
		"glpat-abcdefghij0123456789",                                            // GitLab personal access token
		"AIzaSyB7kq2Xv9pLm3Qw8Rt5Yz1Nc4Hd6Jf0Gs2",                               // Google API key
		"sk_live_abcdefghijklmnop1234",                                          // Stripe live key
		"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", // SendGrid
	} {
		v := CheckResult(bashResult("cat config", mask.Secrets("value: "+secret+"\n")), nil, []*CompiledPolicy{p}, nil)
		if strings.Contains(v.Summary, secret) {
			t.Errorf("secrets: true left %s in %q", secret, v.Summary)
		}
	}
}
