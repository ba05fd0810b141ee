package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// TestPolicyRuleReferenceIsChecked: a reference names a policy's rule or the task's
// mode, never a mix of the two, and the API server refuses one that does, saying what
// to write. Each is written where the controller writes it: a ToolIntent's decision,
// a rule hit of it, an Approval's request, a task's ruleFires.
func TestPolicyRuleReferenceIsChecked(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	intent := newIntent(ns, "refs")
	if err := env.Client.Create(ctx, intent); err != nil {
		t.Fatal(err)
	}
	decide := func(d v1.Decision) error {
		got := &v1.ToolIntent{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(intent), got); err != nil {
			t.Fatal(err)
		}
		got.Status.Decision = &d
		return env.Client.Status().Update(ctx, got)
	}
	rule := v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "team", 3, "allow-tests")
	for _, tc := range []struct {
		name string
		ref  v1.PolicyRuleReference
		want string
	}{
		{"a ModeDefault reference that names a rule",
			v1.PolicyRuleReference{Kind: v1.PolicyRuleKindModeDefault, Name: "Edit", Rule: "mode-default"},
			"rule must not be set for kind ModeDefault: no rule decided, the task's mode did; write {kind: ModeDefault, name: <the task's mode>}"},
		{"a ToolPolicy reference without its rule",
			v1.PolicyRuleReference{Kind: v1.PolicyRuleKindToolPolicy, Name: "team", Generation: 3},
			"rule is required for a ToolPolicy or ClusterToolPolicy reference: name the policy's rule, for example {kind: ToolPolicy, name: team, rule: allow-tests}"},
		{"a ClusterToolPolicy reference without its rule",
			v1.PolicyRuleReference{Kind: v1.PolicyRuleKindClusterToolPolicy, Name: "baseline"},
			"rule is required for a ToolPolicy or ClusterToolPolicy reference"},
		{"a ModeDefault reference with a generation",
			v1.PolicyRuleReference{Kind: v1.PolicyRuleKindModeDefault, Name: "Edit", Generation: 2},
			"generation must not be set for kind ModeDefault: a mode has no generation"},
		{"a ModeDefault reference naming no mode",
			v1.PolicyRuleReference{Kind: v1.PolicyRuleKindModeDefault, Name: "Ask"},
			"name of a ModeDefault reference is the task's mode: ReadOnly, Edit or Auto"},
		{"a kind that is none",
			v1.PolicyRuleReference{Kind: "Mode", Name: "Edit"},
			`status.decision.policyRuleRef.kind: Unsupported value: "Mode": supported values: "ToolPolicy", "ClusterToolPolicy", "ModeDefault"`},
		{"a reference without a name",
			v1.PolicyRuleReference{Kind: v1.PolicyRuleKindToolPolicy, Rule: "allow-tests"},
			"status.decision.policyRuleRef.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireInvalid(t, decide(v1.Decision{Action: v1.DecisionAllow, PolicyRuleRef: tc.ref}), tc.want)
		})
	}

	// A rule hit names a policy's rule, with an action and an enforcement of the
	// enums a rule has.
	hit := v1.RuleHit{PolicyRuleRef: rule, Action: v1.RuleAudit, Enforcement: v1.EnforcementDryRun}
	for _, tc := range []struct {
		name string
		hit  func(h *v1.RuleHit)
		want string
	}{
		{"a hit of the mode", func(h *v1.RuleHit) { h.PolicyRuleRef = v1.ModeDefaultReference(v1.ModeEdit) },
			"a rule hit is a policy's rule: policyRuleRef.kind is ToolPolicy or ClusterToolPolicy"},
		{"an action that is none", func(h *v1.RuleHit) { h.Action = "allow" },
			`status.decision.nonActingHits[0].action: Unsupported value: "allow": supported values: "Allow", "Ask", "Deny", "Audit", "Redirect", "Stop"`},
		{"an enforcement that is none", func(h *v1.RuleHit) { h.Enforcement = "Shadow" },
			`status.decision.nonActingHits[0].enforcement: Unsupported value: "Shadow": supported values: "Enforce", "DryRun"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hit
			tc.hit(&h)
			requireInvalid(t, decide(v1.Decision{Action: v1.DecisionAllow, PolicyRuleRef: rule, NonActingHits: []v1.RuleHit{h}}), tc.want)
		})
	}

	// What the controller writes is accepted.
	for _, d := range []v1.Decision{
		{Action: v1.DecisionAllow, PolicyRuleRef: rule, NonActingHits: []v1.RuleHit{hit}},
		{Action: v1.DecisionAsk, PolicyRuleRef: v1.ModeDefaultReference(v1.ModeEdit)},
		{Action: v1.DecisionDeny, PolicyRuleRef: v1.ModeDefaultReference("")},
		// A rule may be named mode-default: ModeDefault is a kind, not a rule name.
		{Action: v1.DecisionDeny, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindClusterToolPolicy, "baseline", 1, "mode-default")},
	} {
		if err := decide(d); err != nil {
			t.Errorf("decision by %s refused: %v", d.PolicyRuleRef, err)
		}
	}

	// An Approval's request, in its spec.
	approval := newApproval(ns, "asked-by-mode")
	approval.Spec.Request.PolicyRuleRef = v1.PolicyRuleReference{Kind: v1.PolicyRuleKindModeDefault, Name: "Edit", Rule: "ask"}
	requireInvalid(t, env.Client.Create(ctx, approval), "spec.request.policyRuleRef: Invalid value: rule must not be set for kind ModeDefault")
	approval.Spec.Request.PolicyRuleRef = v1.ModeDefaultReference(v1.ModeEdit)
	if err := env.Client.Create(ctx, approval); err != nil {
		t.Errorf("an approval asked by the mode refused: %v", err)
	}
}

// TestRuleFiresAreKeyedByTheirReference: status.ruleFires is keyed by id, which
// must be the entry's reference as Kind/name/rule, and counts a policy's rules
// across their generations only.
func TestRuleFiresAreKeyedByTheirReference(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	task := newTask(ns, "fires")
	if err := env.Client.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	fire := func(f v1.RuleFires) error {
		got := &v1.AgentTask{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(task), got); err != nil {
			t.Fatal(err)
		}
		f.Fires, f.LastFiredAt = 1, &metav1.Time{Time: metav1.Now().Rfc3339Copy().Time}
		got.Status.RuleFires = []v1.RuleFires{f}
		return env.Client.Status().Update(ctx, got)
	}
	ref := v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "gate", 0, "plan-rm")
	good := v1.NewRuleFires(ref, v1.WhenToolCall)
	if good.ID != "ToolPolicy/gate/plan-rm" {
		t.Fatalf("id %q, want ToolPolicy/gate/plan-rm", good.ID)
	}
	if err := fire(good); err != nil {
		t.Fatalf("a rule's fires refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		f    func(f *v1.RuleFires)
		want string
	}{
		{"an id that is not the reference", func(f *v1.RuleFires) { f.ID = "ToolPolicy/gate/other" },
			"id must be policyRuleRef as kind/name/rule, for example ToolPolicy/team/plan-rm"},
		{"fires of the mode", func(f *v1.RuleFires) {
			f.PolicyRuleRef, f.ID = v1.ModeDefaultReference(v1.ModeEdit), "ModeDefault/Edit"
		},
			"ruleFires counts the fires of a policy's rules: policyRuleRef.kind is ToolPolicy or ClusterToolPolicy"},
		{"fires of one generation", func(f *v1.RuleFires) { f.PolicyRuleRef.Generation = 4 },
			"policyRuleRef.generation must not be set in ruleFires: a rule's fires are counted across its policy's generations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := good
			tc.f(&f)
			requireInvalid(t, fire(f), tc.want)
		})
	}
}

// TestServiceAccountProposersAreChecked: a service account proposer is a namespace
// and a name, each a valid name, and the API server says what is wrong with one
// that is not.
func TestServiceAccountProposersAreChecked(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	withAccounts := func(name string, accounts ...map[string]any) client.Object {
		list := make([]any, len(accounts))
		for i, a := range accounts {
			list[i] = a
		}
		return unstructuredTask(ns, name, map[string]any{
			"goal":      "x",
			"workspace": map[string]any{"existingClaim": "ws"},
			"agent":     map[string]any{"external": map[string]any{"proposers": map[string]any{"serviceAccounts": list}}},
		})
	}
	for i, tc := range []struct {
		name     string
		accounts []map[string]any
		want     string
	}{
		{"a service account without a name", []map[string]any{{"namespace": "team-a"}},
			"spec.agent.external.proposers.serviceAccounts[0].name: Required value"},
		{"a service account without a namespace", []map[string]any{{"name": "coding-agent"}},
			"spec.agent.external.proposers.serviceAccounts[0].namespace: Required value"},
		{"a namespace that is no namespace's name", []map[string]any{{"namespace": "Team_A", "name": "coding-agent"}},
			"namespace of a service account is a namespace's name: lower-case letters, digits and '-', starting and ending with a letter or digit, for example team-a"},
		{"a name that is no service account's", []map[string]any{{"namespace": "team-a", "name": "team-a/coding-agent"}},
			"name of a service account is lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, for example coding-agent"},
		{"the same service account twice", []map[string]any{{"namespace": "team-a", "name": "coding-agent"}, {"namespace": "team-a", "name": "coding-agent"}},
			`spec.agent.external.proposers.serviceAccounts[1]: Duplicate value: {"name":"coding-agent","namespace":"team-a"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireInvalid(t, env.Client.Create(ctx, withAccounts(fmt.Sprintf("bad-%d", i), tc.accounts...)), tc.want)
		})
	}
	if err := env.Client.Create(ctx, withAccounts("ok",
		map[string]any{"namespace": "team-a", "name": "coding-agent"},
		map[string]any{"namespace": "team-b", "name": "coding-agent"})); err != nil {
		t.Errorf("two service accounts refused: %v", err)
	}
}
