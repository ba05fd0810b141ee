package policy

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
)

// TestRedactResistsShapedOutput: the agent chooses what its commands print. Output
// shaped so a Redact rule's pattern or the detector would miss the secret (terminal
// escapes inside it, CRLF line ends, invisible format characters, a pattern's
// alternative without the group) still reaches the model without the secret.
func TestRedactResistsShapedOutput(t *testing.T) {
	for _, tc := range []struct {
		name     string
		patterns []string
		secrets  bool
		output   string
		secret   []string
	}{
		{"an ANSI colour inside the value", []string{`ref=[A-Za-z0-9]+`}, false, "ref=\x1b[31mabcdef123456\x1b[0m\n", []string{"abcdef123456"}},
		{"an ANSI sequence splitting the value", []string{`ref=[A-Za-z0-9]+`}, false, "ref=abcdef\x1b[0m123456\n", []string{"123456"}},
		{"an OSC title sequence in the value", []string{`ref=[A-Za-z0-9]+`}, false, "ref=abc\x1b]0;x\x07def123456\n", []string{"def123456"}},
		{"CRLF line ends under a (?m)...$ pattern", []string{secretValues}, false, "data:\r\n  password: czNjcjN0LXBhc3N3b3Jk\r\n  host: ZGIuZXhhbXBsZS5jb20=\r\n", []string{"czNjcjN0LXBhc3N3b3Jk", "ZGIuZXhhbXBsZS5jb20="}},
		{"a carriage return inside the value", []string{`ref=[A-Za-z0-9]+`}, false, "ref=abcdef\r123456\n", []string{"123456"}},
		{"a zero-width space inside the value", []string{`ref=[A-Za-z0-9]+`}, false, "ref=abcdef\u200b123456\n", []string{"123456"}},
		{"a soft hyphen inside an AWS key", nil, true, "AWS_ACCESS_KEY_ID=AKIAIOSF\u00adODNN7EXAMPLE\n", []string{"ODNN7EXAMPLE"}},
		{"an ANSI reset inside an AWS key", nil, true, "AKIAIOSF\x1b[0mODNN7EXAMPLE\n", []string{"ODNN7EXAMPLE"}},
		{"the alternative without the group", []string{`ref=(\S+)|INTERNAL-[0-9]{6}`}, false, "key INTERNAL-424242\n", []string{"424242"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := resultRule("r", v1alpha1.RuleRedact, "")
			rule.Redact = &v1alpha1.RedactSpec{Patterns: tc.patterns, Secrets: tc.secrets}
			p := mustCompile(t, KindToolPolicy, "p", rule)
			// The summary a rule sees is masked as it is made (mask.Escape spells
			// control characters out).
			v := CheckResult(bashResult("cat x", mask.Secrets(tc.output)), nil, []*CompiledPolicy{p}, nil)
			for _, s := range tc.secret {
				if strings.Contains(v.Summary, s) {
					t.Errorf("the model sees %q in %q", s, v.Summary)
				}
			}
			if v.Check == nil || v.Check.Redactions == 0 {
				t.Errorf("check %+v: nothing recorded as redacted", v.Check)
			}
		})
	}
}

// TestResultEvalErrorDoesNotQuoteTheOutput: an expression the output makes fail
// acts, and the reason it records (the intent's status, which the agent may read;
// the Approval; the task's condition) does not carry the output CEL's error quoted.
func TestResultEvalErrorDoesNotQuoteTheOutput(t *testing.T) {
	for _, expr := range []string{
		`{'a': true}[result.output]`,
		`timestamp(result.output) > timestamp('2020-01-01T00:00:00Z')`,
		`int(result.output) > 0`,
		`duration(result.output) > duration('1s')`,
	} {
		p := mustCompile(t, KindToolPolicy, "p", resultRule("r", v1alpha1.RuleReplace, expr))
		v := CheckResult(bashResult("cat x", "PW=TOPSECRETVALUE"), nil, []*CompiledPolicy{p}, nil)
		if v.Check == nil || v.Check.Action != v1alpha1.RuleReplace || !strings.Contains(v.Check.Reason, "its expression failed, which counts as a match") {
			t.Fatalf("%s: check %+v, want a Replace that failed closed", expr, v.Check)
		}
		if strings.Contains(v.Check.Reason, "TOPSECRET") {
			t.Errorf("%s: the reason quotes the output: %q", expr, v.Check.Reason)
		}
	}
}
