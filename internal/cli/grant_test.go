package cli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func TestBuildGrant(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	rule := v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "team", 1, "tests-ask")
	a := &v1.Approval{ObjectMeta: metav1.ObjectMeta{Name: "fix-tests-t0-0", Namespace: "team-a"},
		Spec: v1.ApprovalSpec{TaskRef: v1.LocalObjectReference{Name: "fix-tests"}, Request: v1.ApprovalRequest{Tool: v1.ToolBash, PolicyRuleRef: rule}}}
	intent := func(scopes ...v1.GrantScope) *v1.ToolIntent {
		in := &v1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Name: "fix-tests-t0-0"}, Spec: v1.ToolIntentSpec{Tool: v1.ToolBash, Input: runtime.RawExtension{Raw: []byte(`{"command":"npm test -- --ci"}`)}},
			Status: v1.ToolIntentStatus{Decision: &v1.Decision{Action: v1.DecisionAsk, PolicyRuleRef: rule}}}
		if scopes != nil {
			in.Status.Decision.Grants = &v1.RuleGrants{AllowedScopes: scopes, MaxUses: ptrTo[int32](5), MaxDurationSeconds: ptrTo[int32](1800)}
		}
		return in
	}
	task := &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "fix-tests", UID: "uid-1"}}
	both := []v1.GrantScope{v1.GrantScopeTask, v1.GrantScopeCommandPrefix}
	tests := []struct {
		name   string
		intent *v1.ToolIntent
		opts   grantOptions
		// want is the error's words; "" for a grant.
		want string
	}{
		{name: "once needs no grant", intent: intent(), opts: grantOptions{scope: "once"}},
		{name: "task within the rule's bounds", intent: intent(both...), opts: grantOptions{scope: "task", uses: 3, within: 10 * time.Minute}},
		{name: "prefix of the approved command", intent: intent(both...), opts: grantOptions{scope: "prefix", prefix: "npm test"}},
		{name: "a scope the rule does not allow", intent: intent(), opts: grantOptions{scope: "task"}, want: "does not allow scope Task (it allows [Once]"},
		{name: "an unknown scope", intent: intent(both...), opts: grantOptions{scope: "forever"}, want: `--scope "forever" is not one of once, task, prefix`},
		{name: "more uses than the rule allows", intent: intent(both...), opts: grantOptions{scope: "task", uses: 6}, want: "--uses 6 is outside 1..5"},
		{name: "longer than the rule allows", intent: intent(both...), opts: grantOptions{scope: "task", within: time.Hour}, want: "longer than rule ToolPolicy/team/tests-ask allows (30m0s)"},
		{name: "prefix without words", intent: intent(both...), opts: grantOptions{scope: "prefix"}, want: "--scope prefix needs --prefix"},
		{name: "a prefix that is not the approved command's", intent: intent(both...), opts: grantOptions{scope: "prefix", prefix: "rm -rf"}, want: "does not cover the call you approve"},
		{name: "a prefix with another scope", intent: intent(both...), opts: grantOptions{scope: "task", prefix: "npm"}, want: "--prefix is for --scope prefix only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := buildGrant(a, tt.intent, task, "alice", tt.opts, now)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %v; want an error saying %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.opts.scope == "once" {
				if g != nil {
					t.Fatalf("got grant %+v for --scope once", g.Spec)
				}
				return
			}
			if g.Spec.GrantedBy != "alice" || g.Spec.TaskUID != "uid-1" || len(g.OwnerReferences) != 1 || g.OwnerReferences[0].UID != "uid-1" || g.Spec.ExpiresAt.After(now.Add(30*time.Minute)) {
				t.Fatalf("grant %+v owners %+v", g.Spec, g.OwnerReferences)
			}
		})
	}

	// What two people approve together, one of them cannot extend alone.
	four := a.DeepCopy()
	four.Spec.Approvers = &v1.Approvers{Users: []string{"alice", "bob"}, Required: 2}
	in := intent(both...)
	in.Status.Decision.Approvers = *four.Spec.Approvers
	if _, err := buildGrant(four, in, task, "alice", grantOptions{scope: "task"}, now); err == nil || !strings.Contains(err.Error(), "needs 2 approvers, and a grant is one person's") {
		t.Fatalf("a grant of a quorum-of-two approval: got %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }
