package pipeline

import (
	"strings"
	"testing"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func TestStricter(t *testing.T) {
	allowMode := &v1.Decision{Action: v1.DecisionAllow, PolicyRuleRef: v1.ModeDefaultReference(v1.ModeEdit)}
	allowRule := &v1.Decision{Action: v1.DecisionAllow, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 1, "allow-tests")}
	askMode := &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.ModeDefaultReference(v1.ModeEdit)}
	askRule := &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 1, "ask-edits")}
	askRuleNewGen := &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 2, "ask-edits")}
	askOtherRule := &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 2, "ask-network")}
	askOtherPolicy := &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindClusterToolPolicy, "p", 1, "ask-edits")}
	deny := &v1.Decision{Action: v1.DecisionDeny, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindClusterToolPolicy, "emergency", 1, "freeze")}
	stop := &v1.Decision{Action: v1.DecisionStop, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindClusterToolPolicy, "emergency", 1, "tripwire")}
	redirect := &v1.Decision{Action: v1.DecisionRedirect, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 1, "plan-first")}
	cases := []struct {
		name          string
		recorded, now *v1.Decision
		want          Recheck
		whySubstrings []string
	}{
		{"allow, still the same allow", allowRule, allowRule, RecheckRun, nil},
		{"allow by a rule, now by the mode", allowRule, allowMode, RecheckRun, nil},
		{"allow, now deny", allowMode, deny, RecheckDeny, []string{"ClusterToolPolicy/emergency/freeze (generation 1)", "was Allow by ModeDefault/Edit"}},
		{"allow, now ask", allowRule, askMode, RecheckAsk, []string{"Ask by ModeDefault/Edit", "was Allow by ToolPolicy/p/allow-tests"}},
		{"ask, now deny", askRule, deny, RecheckDeny, []string{"deny", "ClusterToolPolicy/emergency/freeze"}},
		{"ask by the mode, now deny", askMode, deny, RecheckDeny, []string{"ClusterToolPolicy/emergency/freeze"}},
		{"ask, the same rule asks", askRule, askRule, RecheckRun, nil},
		{"ask, a new generation of the same rule (the fingerprint's concern)", askRule, askRuleNewGen, RecheckRun, nil},
		{"ask, another rule of the policy asks", askRule, askOtherRule, RecheckAsk, []string{"ToolPolicy/p/ask-network (generation 2)", "asked by ToolPolicy/p/ask-edits"}},
		{"ask, a rule of the same name in another policy asks", askRule, askOtherPolicy, RecheckAsk, []string{"ClusterToolPolicy/p/ask-edits"}},
		{"ask by the mode, now a rule asks", askMode, askRule, RecheckAsk, []string{"ToolPolicy/p/ask-edits"}},
		{"ask by a rule, now the mode asks", askRule, askMode, RecheckAsk, []string{"ModeDefault/Edit"}},
		{"ask, now allowed: the approval still counts", askRule, allowRule, RecheckRun, nil},
		{"allow, now stop", allowRule, stop, RecheckDeny, []string{"Stop by ClusterToolPolicy/emergency/tripwire"}},
		{"an approved ask, now stop", askRule, stop, RecheckDeny, []string{"ClusterToolPolicy/emergency/tripwire"}},
		{"allow, now redirect: it does not run", allowMode, redirect, RecheckDeny, []string{"now redirect it", "ToolPolicy/p/plan-first"}},
		{"an approved ask, now redirect: the approval stands", askRule, redirect, RecheckRun, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Stricter(tc.recorded, tc.now)
			if got != tc.want {
				t.Fatalf("Stricter = %d (%s), want %d", got, why, tc.want)
			}
			if got == RecheckRun && why != "" {
				t.Errorf("a call that runs needs no why, got %q", why)
			}
			for _, sub := range tc.whySubstrings {
				if !strings.Contains(why, sub) {
					t.Errorf("why %q does not say %q", why, sub)
				}
			}
		})
	}
}

func TestSupersedeAndApprovalNames(t *testing.T) {
	intent := makeIntent("fix-t2-0").validated(60, "").obj()
	intent.Status.Decision = &v1.Decision{Action: v1.DecisionAllow, PolicyRuleRef: v1.ModeDefaultReference(v1.ModeEdit)}
	if got := ApprovalName(intent); got != "fix-t2-0" {
		t.Fatalf("first approval name = %q", got)
	}
	// Allow, then an Ask: the first Ask of the intent, the intent's name.
	if !Supersede(intent, &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.ModeDefaultReference(v1.ModeEdit)}) {
		t.Fatal("Supersede refused the first re-decision")
	}
	if got := ApprovalName(intent); got != "fix-t2-0" {
		t.Errorf("after Allow -> Ask, approval name = %q, want the intent's", got)
	}
	intent.Status.ApprovalName = "fix-t2-0"
	// Ask, then another rule asks: a name of its own, and the ref is cleared.
	if !Supersede(intent, &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "ask-network")}) {
		t.Fatal("Supersede refused the second re-decision")
	}
	if got := ApprovalName(intent); got != "fix-t2-0-ask-2" {
		t.Errorf("second asking decision's approval = %q, want fix-t2-0-ask-2", got)
	}
	if intent.Status.ApprovalName != "" || intent.Status.Decision.PolicyRuleRef.Rule != "ask-network" || len(intent.Status.SupersededDecisions) != 2 ||
		intent.Status.SupersededDecisions[0].Action != v1.DecisionAllow || !intent.Status.SupersededDecisions[1].PolicyRuleRef.IsModeDefault() {
		t.Errorf("status after superseding: %+v", intent.Status)
	}
	// Bounded: the intent is decided at most MaxDecisions times.
	for Supersede(intent, &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "r")}) {
	}
	if n := len(intent.Status.SupersededDecisions) + 1; n != MaxDecisions {
		t.Errorf("decided %d times, want at most %d", n, MaxDecisions)
	}

	// Long names stay names: cut, never ending in a separator.
	long := makeIntent(strings.Repeat("a", 240) + "-" + strings.Repeat("b", 12)).obj()
	long.Status.SupersededDecisions = []v1.Decision{{Action: v1.DecisionAsk}}
	if got := ApprovalName(long); len(got) > 253 || !strings.HasSuffix(got, "-ask-2") || strings.Contains(got, "--") {
		t.Errorf("long approval name = %q (%d)", got, len(got))
	}
}
