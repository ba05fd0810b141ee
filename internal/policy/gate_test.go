package policy

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

func redirectRule(name string, words ...string) v1alpha1.PolicyRule {
	r := onCommand(name, v1alpha1.RuleRedirect, words...)
	r.Instruction = "List what " + name + " would remove and how to restore it, then propose a new call."
	return r
}

// TestDecideRedirectAndStop: the precedence Stop > Deny > Ask > Redirect > Allow,
// across cluster and namespaced policies, and a Redirect carries its registered
// instruction.
func TestDecideRedirectAndStop(t *testing.T) {
	nsAllowRm := mustCompile(t, KindToolPolicy, "team", onCommand("allow-rm", v1alpha1.RuleAllow, "rm"))
	nsRedirectRm := mustCompile(t, KindToolPolicy, "plan", redirectRule("plan-rm", "rm"))
	nsAskRm := mustCompile(t, KindToolPolicy, "careful", onCommand("ask-rm", v1alpha1.RuleAsk, "rm"))
	clusterDenyRm := mustCompile(t, KindClusterToolPolicy, "baseline", onCommand("no-rm", v1alpha1.RuleDeny, "rm"))
	nsStopRm := mustCompile(t, KindToolPolicy, "tripwire", onCommand("stop-rm", v1alpha1.RuleStop, "rm"))
	clusterRedirectRm := mustCompile(t, KindClusterToolPolicy, "plan", redirectRule("plan-rm", "rm"))
	for _, tc := range []struct {
		name                string
		cluster, namespaced []*CompiledPolicy
		mode                v1alpha1.TaskMode
		want                v1alpha1.DecisionAction
		// rule is the deciding rule's name; "" for the mode's default.
		rule string
	}{
		{name: "redirect beats allow", namespaced: []*CompiledPolicy{nsAllowRm, nsRedirectRm}, want: v1alpha1.DecisionRedirect, rule: "plan-rm"},
		{name: "a cluster redirect beats a namespaced allow", cluster: []*CompiledPolicy{clusterRedirectRm}, namespaced: []*CompiledPolicy{nsAllowRm}, want: v1alpha1.DecisionRedirect, rule: "plan-rm"},
		{name: "ask beats redirect: a human still sees the call", namespaced: []*CompiledPolicy{nsRedirectRm, nsAskRm}, want: v1alpha1.DecisionAsk, rule: "ask-rm"},
		{name: "deny beats redirect", cluster: []*CompiledPolicy{clusterDenyRm}, namespaced: []*CompiledPolicy{nsRedirectRm}, want: v1alpha1.DecisionDeny, rule: "no-rm"},
		{name: "stop beats a cluster deny", cluster: []*CompiledPolicy{clusterDenyRm}, namespaced: []*CompiledPolicy{nsStopRm, nsAllowRm}, want: v1alpha1.DecisionStop, rule: "stop-rm"},
		{name: "ReadOnly mode denies a redirected write", namespaced: []*CompiledPolicy{nsRedirectRm}, mode: v1alpha1.ModeReadOnly, want: v1alpha1.DecisionDeny, rule: ""},
		{name: "ReadOnly mode keeps a stop", namespaced: []*CompiledPolicy{nsStopRm}, mode: v1alpha1.ModeReadOnly, want: v1alpha1.DecisionStop, rule: "stop-rm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			if mode == "" {
				mode = v1alpha1.ModeAuto
			}
			d := Decide(bashCall(mode, "ls && rm -rf build"), tc.cluster, tc.namespaced, nil)
			if d.Action != tc.want || d.PolicyRuleRef.Rule != tc.rule || d.PolicyRuleRef.IsModeDefault() != (tc.rule == "") {
				t.Fatalf("decided %s by %s (%s), want %s by %q", d.Action, d.PolicyRuleRef, d.Reason, tc.want, tc.rule)
			}
			if (d.Instruction != "") != (d.Action == v1alpha1.DecisionRedirect) {
				t.Errorf("instruction %q on a %s decision", d.Instruction, d.Action)
			}
			if d.Action == v1alpha1.DecisionRedirect && !strings.Contains(d.Instruction, "how to restore it") {
				t.Errorf("instruction %q is not the rule's registered text", d.Instruction)
			}
		})
	}
}

// TestFireLimits: a Redirect rule past its maxFires or inside its cooldown records a
// limited hit and lets the next rule decide; limits never apply to what holds a call.
func TestFireLimits(t *testing.T) {
	once := redirectRule("plan-rm", "rm")
	once.MaxFires = ptr.To[int32](1)
	cool := redirectRule("cool-rm", "rm")
	cool.CooldownSeconds = ptr.To[int32](60)
	p := mustCompile(t, KindToolPolicy, "plan", once)
	c := mustCompile(t, KindToolPolicy, "cool", cool)
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	fired := func(key string, count int32, ago time.Duration) FireCounts {
		return func(k string) Fires {
			if k == key {
				return Fires{Count: count, Last: now.Add(-ago)}
			}
			return Fires{}
		}
	}
	for _, tc := range []struct {
		name    string
		policy  *CompiledPolicy
		fires   FireCounts
		want    v1alpha1.DecisionAction
		limited string
	}{
		{name: "first fire", policy: p, want: v1alpha1.DecisionRedirect},
		{name: "maxFires reached: the mode decides (Edit asks)", policy: p, fires: fired("ToolPolicy/plan/plan-rm", 1, time.Hour), want: v1alpha1.DecisionAsk, limited: "maxFires 1 reached"},
		{name: "another rule's fires do not count", policy: p, fires: fired("ToolPolicy/other/plan-rm", 5, 0), want: v1alpha1.DecisionRedirect},
		{name: "inside the cooldown", policy: c, fires: fired("ToolPolicy/cool/cool-rm", 3, 10*time.Second), want: v1alpha1.DecisionAsk, limited: "cooldownSeconds 60"},
		{name: "after the cooldown", policy: c, fires: fired("ToolPolicy/cool/cool-rm", 3, 2*time.Minute), want: v1alpha1.DecisionRedirect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := bashCall(v1alpha1.ModeEdit, "rm -rf build")
			req.Fires, req.Now = tc.fires, now
			d := Decide(req, nil, []*CompiledPolicy{tc.policy}, nil)
			if d.Action != tc.want {
				t.Fatalf("decided %s by %s, want %s", d.Action, d.PolicyRuleRef, tc.want)
			}
			var limited string
			for _, h := range d.NonActingHits {
				limited += h.Limited
			}
			if tc.limited == "" && limited != "" || !strings.Contains(limited, tc.limited) {
				t.Errorf("limited hits say %q, want %q", limited, tc.limited)
			}
		})
	}

	// A limit on anything but a Redirect is refused: it would let a call through.
	for _, action := range []v1alpha1.RuleAction{v1alpha1.RuleDeny, v1alpha1.RuleAsk, v1alpha1.RuleStop, v1alpha1.RuleAllow} {
		r := onCommand("limited", action, "rm")
		r.MaxFires = ptr.To[int32](1)
		if _, err := Compile(KindToolPolicy, "p", 1, v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{r}}); err == nil || !strings.Contains(err.Error(), "Redirect rules only") {
			t.Errorf("a %s rule with maxFires compiled (err %v)", action, err)
		}
	}
	// A Redirect needs its registered instruction, and nothing else takes one.
	noText := onCommand("plan", v1alpha1.RuleRedirect, "rm")
	withText := onCommand("deny", v1alpha1.RuleDeny, "rm")
	withText.Instruction = "do this instead"
	for _, r := range []v1alpha1.PolicyRule{noText, withText} {
		if _, err := Compile(KindToolPolicy, "p", 1, v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{r}}); err == nil {
			t.Errorf("rule %s (%s, instruction %q) compiled", r.Name, r.Action, r.Instruction)
		}
	}
}

// testsPassAfterLastEdit is the completion gate of the sample policy: the answer
// is refused while the last edit has no passing test after it.
const testsPassAfterLastEdit = `history.exists(e, e.executed && e.category in ['Write', 'Delete']) &&
  !history.exists(t, t.category == 'Test' && t.outcome == 'Succeeded' &&
    !history.exists(e, e.executed && e.category in ['Write', 'Delete'] && e.position > t.position))`

func TestDecideCompletion(t *testing.T) {
	gate := v1alpha1.PolicyRule{Name: "tests-after-edit", When: v1alpha1.WhenCompletion, Action: v1alpha1.RuleRedirect,
		Instruction: "Run the tests after your last edit and show they pass before you finish.",
		Match:       v1alpha1.RuleMatch{CEL: testsPassAfterLastEdit}}
	refuse := v1alpha1.PolicyRule{Name: "no-empty-answer", When: v1alpha1.WhenCompletion, Action: v1alpha1.RuleDeny,
		Reason: "an empty answer is no answer", Match: v1alpha1.RuleMatch{CEL: `size(answer) < 3`}}
	broken := v1alpha1.PolicyRule{Name: "broken", When: v1alpha1.WhenCompletion, Action: v1alpha1.RuleRedirect, Instruction: "x",
		Match: v1alpha1.RuleMatch{CEL: `history[99].exitCode == 0`}}
	p := mustCompile(t, KindToolPolicy, "quality", gate)
	edit := CompletedCall{Tool: v1alpha1.ToolEditFile, Category: v1alpha1.CategoryWrite, Outcome: v1alpha1.OutcomeSucceeded, Executed: true, ExitCode: 0}
	pass := CompletedCall{Tool: v1alpha1.ToolBash, Category: v1alpha1.CategoryTest, Outcome: v1alpha1.OutcomeSucceeded, Executed: true, ExitCode: 0}
	fail := CompletedCall{Tool: v1alpha1.ToolBash, Category: v1alpha1.CategoryTest, Outcome: v1alpha1.OutcomeFailed, Executed: true, ExitCode: 1}
	deniedEdit := edit
	deniedEdit.Outcome, deniedEdit.Executed = v1alpha1.OutcomeDenied, false
	for _, tc := range []struct {
		name     string
		policies []*CompiledPolicy
		history  []CompletedCall
		answer   string
		fires    FireCounts
		want     v1alpha1.DecisionAction
	}{
		{name: "no edit: accepted", policies: []*CompiledPolicy{p}, history: []CompletedCall{pass}, want: v1alpha1.DecisionAllow},
		{name: "edit, then a passing test: accepted", policies: []*CompiledPolicy{p}, history: []CompletedCall{fail, edit, pass}, want: v1alpha1.DecisionAllow},
		{name: "a passing test before the last edit: redirected", policies: []*CompiledPolicy{p}, history: []CompletedCall{pass, edit}, want: v1alpha1.DecisionRedirect},
		{name: "edit, then a failing test: redirected", policies: []*CompiledPolicy{p}, history: []CompletedCall{edit, fail}, want: v1alpha1.DecisionRedirect},
		{name: "an edit that never ran is no edit", policies: []*CompiledPolicy{p}, history: []CompletedCall{pass, deniedEdit}, want: v1alpha1.DecisionAllow},
		{name: "fired once already (the default maxFires): accepted", policies: []*CompiledPolicy{p}, history: []CompletedCall{edit},
			fires: func(string) Fires { return Fires{Count: 1} }, want: v1alpha1.DecisionAllow},
		{name: "deny beats redirect", policies: []*CompiledPolicy{p, mustCompile(t, KindToolPolicy, "strict", refuse)}, history: []CompletedCall{edit}, answer: "ok", want: v1alpha1.DecisionDeny},
		{name: "an expression that fails counts as a match", policies: []*CompiledPolicy{mustCompile(t, KindToolPolicy, "b", broken)}, want: v1alpha1.DecisionRedirect},
		{name: "an expression that fails once the fires are used refuses the answer", policies: []*CompiledPolicy{mustCompile(t, KindToolPolicy, "b", broken)},
			fires: func(string) Fires { return Fires{Count: 1} }, want: v1alpha1.DecisionDeny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := tc.answer
			if answer == "" {
				answer = "Fixed."
			}
			c := DecideCompletion(CompletionRequest{Namespace: "team", Task: "fix", Answer: answer, History: tc.history, Fires: tc.fires}, nil, tc.policies)
			if c.Action != tc.want {
				t.Fatalf("completion %s by %v (%s), want %s", c.Action, c.PolicyRuleRef, c.Reason, tc.want)
			}
			if c.Action == v1alpha1.DecisionRedirect && c.Instruction == "" {
				t.Error("a redirected answer carries no instruction")
			}
			if tc.fires != nil && c.Action == v1alpha1.DecisionDeny && c.PolicyRuleRef != nil && c.PolicyRuleRef.Rule == "broken" && !strings.Contains(c.Reason, "its fires are used, so the answer is refused") {
				t.Errorf("reason %q does not say why the answer was refused", c.Reason)
			}
		})
	}

	// A Completion rule describes answers, not calls.
	bad := gate
	bad.Match.Tools = []v1alpha1.ToolName{v1alpha1.ToolBash}
	stop := gate
	stop.Action, stop.Instruction = v1alpha1.RuleStop, ""
	for _, r := range []v1alpha1.PolicyRule{bad, stop} {
		if _, err := Compile(KindToolPolicy, "p", 1, v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{r}}); err == nil {
			t.Errorf("completion rule %+v compiled", r)
		}
	}
	// And it never decides a tool call.
	if d := Decide(bashCall(v1alpha1.ModeAuto, "go test ./..."), nil, []*CompiledPolicy{p}, nil); !d.PolicyRuleRef.IsModeDefault() {
		t.Errorf("a Completion rule decided a tool call: %s by %s", d.Action, d.PolicyRuleRef)
	}
}
