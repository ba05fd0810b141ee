package v1alpha1_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// A rule's grants: only an Ask rule extends an approval, CommandPrefix only on a
// bash rule, and allowedScopes defaults to Once.
func TestRuleGrantsAreChecked(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	policy := func(name string, rule v1.PolicyRule) *v1.ToolPolicy {
		return &v1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{rule}}}
	}
	bash := v1.RuleMatch{Tools: []v1.ToolName{v1.ToolBash}, Commands: []v1.CommandPattern{{Prefix: []string{"npm", "test"}}}}

	ok := policy("ok", v1.PolicyRule{Name: "tests", Action: v1.RuleAsk, Match: bash, Grants: &v1.RuleGrants{}})
	if err := env.Client.Create(ctx, ok); err != nil {
		t.Fatalf("an Ask rule with grants was refused: %v", err)
	}
	got := &v1.ToolPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ok), got); err != nil {
		t.Fatal(err)
	}
	if s := got.Spec.Rules[0].Grants.AllowedScopes; len(s) != 1 || s[0] != v1.GrantScopeOnce {
		t.Fatalf("allowedScopes defaulted to %v; want [Once]", s)
	}
	prefix := &v1.RuleGrants{AllowedScopes: []v1.GrantScope{v1.GrantScopeCommandPrefix}}
	if err := env.Client.Create(ctx, policy("prefix", v1.PolicyRule{Name: "tests", Action: v1.RuleAsk, Match: bash, Grants: prefix})); err != nil {
		t.Fatalf("CommandPrefix on a bash rule was refused: %v", err)
	}

	requireInvalid(t, env.Client.Create(ctx, policy("allow", v1.PolicyRule{Name: "tests", Action: v1.RuleAllow, Match: bash, Grants: &v1.RuleGrants{}})),
		"grants are for Ask rules only")
	anyTool := v1.RuleMatch{Commands: bash.Commands}
	requireInvalid(t, env.Client.Create(ctx, policy("any-tool", v1.PolicyRule{Name: "tests", Action: v1.RuleAsk, Match: anyTool, Grants: prefix})),
		"grants.allowedScopes may hold CommandPrefix only on a rule whose match.tools is [bash]")
	requireInvalid(t, env.Client.Create(ctx, policy("many-uses", v1.PolicyRule{Name: "tests", Action: v1.RuleAsk, Match: bash, Grants: &v1.RuleGrants{MaxUses: ptr[int32](1001)}})),
		"maxUses: Invalid value: 1001")
}

// An ApprovalGrant's spec is immutable (revoking is deleting), and a prefix belongs
// to scope CommandPrefix alone.
func TestApprovalGrantSpec(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	grant := func(name string, scope v1.GrantScope, prefix ...string) *v1.ApprovalGrant {
		return &v1.ApprovalGrant{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.ApprovalGrantSpec{
				ApprovalRef: v1.LocalObjectReference{Name: "a"}, TaskRef: v1.LocalObjectReference{Name: "t"}, TaskUID: "uid",
				Scope: scope, CommandPrefix: prefix, MaxUses: 3, ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour)), GrantedBy: "alice",
			},
		}
	}
	g := grant("task", v1.GrantScopeTask)
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatalf("a valid grant was refused: %v", err)
	}
	g.Spec.MaxUses = 1000
	requireInvalid(t, env.Client.Update(ctx, g), "an ApprovalGrant's spec is immutable: delete it to revoke it")

	requireInvalid(t, env.Client.Create(ctx, grant("no-prefix", v1.GrantScopeCommandPrefix)), "spec.commandPrefix is required for scope CommandPrefix and allowed only there")
	requireInvalid(t, env.Client.Create(ctx, grant("task-prefix", v1.GrantScopeTask, "npm")), "spec.commandPrefix is required for scope CommandPrefix and allowed only there")
	requireInvalid(t, env.Client.Create(ctx, grant("once", v1.GrantScopeOnce)), "spec.scope Once needs no grant")
	requireInvalid(t, env.Client.Create(ctx, grant("two-words", v1.GrantScopeCommandPrefix, "npm test")), `spec.commandPrefix[0]: Invalid value: "npm test"`)
}

func ptr[T any](v T) *T { return &v }
