package pipeline

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

func withHash(b *intentBuilder, sha string) v1.ToolIntent {
	in := b.val()
	in.Status.Observation.ContentSHA256 = sha
	return in
}

func TestEarlierAndBaselines(t *testing.T) {
	read1 := withHash(makeIntent("t-t0-0").tool(v1.ToolReadFile).input(`{"path":"a.go"}`).turn(0).observed(v1.OutcomeSucceeded), "h1")
	edit := withHash(makeIntent("t-t2-0").tool(v1.ToolEditFile).input(`{"path":"./a.go","oldText":"x","newText":"y"}`).turn(2).observed(v1.OutcomeSucceeded), "h2")
	failedRead := withHash(makeIntent("t-t3-0").tool(v1.ToolReadFile).input(`{"path":"a.go"}`).turn(3).observed(v1.OutcomeFailed), "stale")
	bash := makeIntent("t-t1-0").tool(v1.ToolBash).input(`{"command":"cat a.go"}`).turn(1).observed(v1.OutcomeSucceeded).val()
	other := withHash(makeIntent("t-t1-1").tool(v1.ToolReadFile).input(`{"path":"/workspace/b.go"}`).turn(1).index(1).observed(v1.OutcomeSucceeded), "hb")
	current := makeIntent("t-t4-0").tool(v1.ToolEditFile).turn(4).obj()
	later := makeIntent("t-t5-0").tool(v1.ToolReadFile).turn(5).val()

	// Given out of order; Earlier sorts and drops the current and later intents.
	earlier := Earlier(current, []v1.ToolIntent{later, edit, failedRead, read1, *current, other, bash})
	var names []string
	for _, e := range earlier {
		names = append(names, e.Name)
	}
	if diff := cmp.Diff([]string{"t-t0-0", "t-t1-0", "t-t1-1", "t-t2-0", "t-t3-0"}, names); diff != "" {
		t.Fatalf("Earlier order (-want +got):\n%s", diff)
	}
	got := Baselines(earlier)
	want := map[string]Baseline{
		"a.go": {SHA256: "h2", Intent: "t-t2-0"}, // the edit after the read wins; the failed read is ignored
		"b.go": {SHA256: "hb", Intent: "t-t1-1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Baselines (-want +got):\n%s", diff)
	}
}

func TestApplyAskLimits(t *testing.T) {
	fp := strings.Repeat("f", 64)
	approval := func(name string, fingerprint string, d v1.ApprovalDecision) v1.Approval {
		a := v1.Approval{}
		a.Name = name
		a.Spec.Fingerprint, a.Spec.Votes = fingerprint, fixtures.Votes(d, "bob", "")
		return a
	}
	cases := []struct {
		name   string
		action v1.DecisionAction
		limit  int32
		others []v1.Approval
		want   v1.DecisionAction
		reason string
	}{
		{"ask within budget", v1.DecisionAsk, 2, []v1.Approval{approval("a", "other", v1.DecisionApproved)}, v1.DecisionAsk, "needs review"},
		{"same call denied before", v1.DecisionAsk, 5, []v1.Approval{approval("a", fp, v1.DecisionDenied)}, v1.DecisionDeny, "already denied by bob in Approval a"},
		{"same call approved before is asked again", v1.DecisionAsk, 5, []v1.Approval{approval("a", fp, v1.DecisionApproved)}, v1.DecisionAsk, "needs review"},
		{"budget used", v1.DecisionAsk, 1, []v1.Approval{approval("a", "other", v1.DecisionApproved)}, v1.DecisionDeny, "limit is reached (1 of budgets.maxApprovalRequests=1)"},
		{"zero budget", v1.DecisionAsk, 0, nil, v1.DecisionDeny, "limit is reached (0 of"},
		{"allow untouched", v1.DecisionAllow, 0, nil, v1.DecisionAllow, "needs review"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := &v1.Decision{Action: tc.action, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "r"), Reason: "needs review", Fingerprint: fp}
			ApplyAskLimits(d, tc.limit, tc.others, nil)
			if d.Action != tc.want || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("got %s %q, want %s containing %q", d.Action, d.Reason, tc.want, tc.reason)
			}
		})
	}
}

// TestRuleFires: a Redirect rule fires once per turn, superseded decisions count,
// and intents decided for another task of the same name do not.
func TestRuleFires(t *testing.T) {
	redirect := func(name string, turn int32, taskUID string, superseded ...v1.Decision) v1.ToolIntent {
		in := v1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.ToolIntentSpec{Turn: turn}}
		in.Status.Decision = &v1.Decision{Action: v1.DecisionRedirect, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "plan"), Sandbox: &v1.DecidedSandbox{TaskUID: taskUID}}
		in.Status.SupersededDecisions = superseded
		return in
	}
	allowed := redirect("allowed", 3, "uid")
	allowed.Status.Decision.Action = v1.DecisionAllow
	intents := []v1.ToolIntent{
		redirect("a", 0, "uid"), redirect("b", 0, "uid"), // one turn: one fire
		redirect("c", 1, "uid"),
		redirect("old", 2, "earlier-task"),
		// Allowed now, redirected when first decided: a fire.
		func() v1.ToolIntent {
			in := allowed
			in.Status.SupersededDecisions = []v1.Decision{{Action: v1.DecisionRedirect, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "plan")}}
			return in
		}(),
	}
	at := metav1.Now()
	checks := []v1.CompletionCheck{{Turn: 4, Action: v1.DecisionRedirect, PolicyRuleRef: ptr(v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "tests")), CheckedAt: &at}, {Turn: 5, Action: v1.DecisionAllow}}
	got := RuleFires("uid", intents, checks)
	if len(got) != 2 || got[0].ID != "ToolPolicy/p/plan" || got[0].Fires != 3 || got[1].ID != "ToolPolicy/p/tests" || got[1].Fires != 1 || got[1].When != v1.WhenCompletion {
		t.Fatalf("fires %+v; want plan 3 times (turns 0, 1, 3) and tests once", got)
	}
}
