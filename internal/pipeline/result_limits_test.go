package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

// A release (the NAME-result Approval of a Result rule's Ask) counts against
// budgets.maxApprovalRequests after its call retires too: the Approval goes with its
// intent, and the history counts the release from the observation's result check.
func TestRetiredReleaseStillCounts(t *testing.T) {
	released := done("t-t0-0", 0, 0, v1.OutcomeSucceeded, epoch)
	ref := v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "review", 1, "env-files")
	released.Status.Observation.ResultCheck = &v1.ResultCheck{Action: v1.RuleAsk, PolicyRuleRef: &ref,
		Effects: []string{"output held for a human by rule ToolPolicy/review/env-files", "output released by bob (Approval t-t0-0-result)"}}

	// While it is live its release counts (others lists t-t0-0-result).
	later := done("t-t1-0", 1, 0, v1.OutcomeSucceeded, epoch)
	later.Status.Observation = nil
	liveRelease := v1.Approval{}
	liveRelease.Name, liveRelease.Spec.IntentRef.Name = "t-t0-0-result", "t-t0-0"
	if why := ResultAskLimit(1, []v1.Approval{liveRelease}, nil, &later); why == "" {
		t.Fatal("precondition: a live release does not count")
	}

	h, ok := Retire(nil, "", "", []v1.ToolIntent{released})
	if !ok {
		t.Fatal("Retire refused")
	}
	if h.ApprovalRequests != 1 {
		t.Errorf("the retired call's release is not counted: history.approvalRequests = %d, want 1", h.ApprovalRequests)
	}
	if why := ResultAskLimit(1, nil, h, &later); why == "" {
		t.Errorf("with budgets.maxApprovalRequests=1 used by a release, a second release is asked once the first call retired")
	}
}

// An output a Result rule withholds (Replace, Stop, a release refused) or redacts
// keeps no contentSHA256 in the observation the agent reads: the hash of the whole
// file would let it guess and check what it was not shown (here a 4-digit PIN).
func TestWithheldReadKeepsNoFileHash(t *testing.T) {
	content := "LOG_LEVEL=debug\nDB_PIN=4821\n"
	sum := sha256.Sum256([]byte(content))
	exec := &v1.Execution{}
	exec.Spec.Tool = v1.ToolReadFile
	exec.Status.Phase = v1.ExecutionSucceeded
	zero := int32(0)
	exec.Status.ExitCode = &zero
	exec.Status.Output = "     1\tLOG_LEVEL=debug\n     2\tDB_PIN=4821\n"
	exec.Status.Facts = &v1.ToolFacts{ContentSHA256: hex.EncodeToString(sum[:])}
	made := FromExecution(exec, epoch)
	ref := v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "review", 1, "env-files")

	for _, tc := range []struct {
		name string
		obs  *v1.Observation
	}{
		{"replaced", ApplyResult(made, policy.ResultVerdict{Summary: made.Summary, Check: &v1.ResultCheck{Action: v1.RuleReplace, PolicyRuleRef: &ref}})},
		{"stopped", ApplyResult(made, policy.ResultVerdict{Summary: made.Summary, Check: &v1.ResultCheck{Action: v1.RuleStop, PolicyRuleRef: &ref}})},
		{"release refused", ApplyRelease(made, policy.ResultVerdict{Summary: made.Summary, Check: &v1.ResultCheck{Action: v1.RuleAsk, PolicyRuleRef: &ref}}, ReleaseRefused, "output withheld: denied by bob")},
		{"redacted", ApplyResult(made, policy.ResultVerdict{Summary: strings.ReplaceAll(made.Summary, "4821", policy.Redacted), Check: &v1.ResultCheck{Action: v1.RuleRedact, PolicyRuleRef: &ref}})},
	} {
		if strings.Contains(tc.obs.Summary, "4821") {
			t.Fatalf("%s: precondition: the summary shows the value: %q", tc.name, tc.obs.Summary)
		}
		// The agent guesses the PIN from the hash.
		for pin := 0; pin < 10000; pin++ {
			guess := sha256.Sum256([]byte(fmt.Sprintf("LOG_LEVEL=debug\nDB_PIN=%04d\n", pin)))
			if hex.EncodeToString(guess[:]) == tc.obs.ContentSHA256 {
				t.Errorf("%s: the observation's contentSHA256 gives away the withheld value %04d", tc.name, pin)
				break
			}
		}
	}
}
