package pipeline

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/mask/masktest"
)

// TestEverySecretIsMaskedInTheRecords: every fake secret of the corpus (gitleaks'
// own true positives of its default rules, and toolgate's own cases) is masked in
// what toolgate writes of a call: the observation of a call that ran (its output
// and its runner's message) and of one that did not (the reason), and the Approval
// (input, the rule's reason, the agent's reason). A text is masked when it holds the
// marker and masking it again finds nothing more.
func TestEverySecretIsMaskedInTheRecords(t *testing.T) {
	corpus, err := masktest.Corpus(mask.Rules(), 3)
	if err != nil {
		t.Fatal(err)
	}
	masked := func(t *testing.T, f masktest.Fixture, where, text string) {
		t.Helper()
		if !strings.Contains(text, mask.Masked) || mask.Secrets(text) != text {
			t.Errorf("%s: the secret of %s is not masked in the %s: %q", f.Rule, shorten(f.Text), where, shorten(text))
		}
	}
	exitCode := int32(1)
	for _, f := range corpus {
		exec := &v1.Execution{Status: v1.ExecutionStatus{
			Phase: v1.ExecutionFailed, ExitCode: &exitCode, ErrorKind: v1.ErrorException,
			Output: f.Text, Message: f.Text,
		}}
		exec.Name = "e1"
		obs := FromExecution(exec, epoch)
		body := strings.SplitN(obs.Summary, "\n", 2)[1]
		masked(t, f, "observation of a call that ran", body)

		masked(t, f, "observation of a refused call", Refusal(v1.OutcomeDenied, f.Text, epoch).Summary)

		input, err := json.Marshal(map[string]string{"command": "echo " + f.Text})
		if err != nil {
			t.Fatal(err)
		}
		d := askDecision()
		d.Reason = f.Text
		intent := makeIntent("t-t2-0").task("fix-tests").tool(v1.ToolBash).input(string(input)).reason(f.Text).obj()
		a := BuildApproval(intent, d, input, 15*time.Minute, epoch)
		masked(t, f, "Approval's reason", a.Spec.Request.Reason)
		masked(t, f, "Approval's agent reason", a.Spec.Request.ProposerReason)
		// The input is masked for the approver with mask.Command, which shows a
		// value after a secret's name when the call reaches it as code (export
		// GITHUB_TOKEN=… does): such a value is not asserted here.
		if mask.Command(f.Text) == mask.Escape(f.Text) {
			continue
		}
		if !strings.Contains(a.Spec.Request.Input, mask.Masked) || mask.Command(a.Spec.Request.Input) != a.Spec.Request.Input {
			t.Errorf("%s: the secret of %s is not masked in the Approval's input: %q", f.Rule, shorten(f.Text), shorten(a.Spec.Request.Input))
		}
	}
}

func shorten(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
