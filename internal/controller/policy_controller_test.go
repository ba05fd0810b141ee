package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// commandPattern is the CommandPattern of an argv prefix.
func commandPattern(t *testing.T, words ...string) v1.CommandPattern {
	t.Helper()
	return v1.CommandPattern{Prefix: words}
}

// waitForReady polls the policy through the uncached client until its Ready
// condition describes the current generation, and returns that condition.
func waitForReady(t *testing.T, obj client.Object, status func() v1.ToolPolicyStatus) (metav1.Condition, v1.ToolPolicyStatus) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatalf("getting policy: %v", err)
		}
		s := status()
		if c := meta.FindStatusCondition(s.Conditions, v1.ConditionReady); c != nil && s.ObservedGeneration == obj.GetGeneration() && c.ObservedGeneration == obj.GetGeneration() {
			return *c, s
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy %s never got a Ready condition for generation %d; status: %+v", obj.GetName(), obj.GetGeneration(), s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestPolicyReconciler(t *testing.T) {
	startManager(t, setupPolicies)
	ns := env.Namespace(t)

	denyPush := v1.PolicyRule{
		Name: "deny-push", Action: v1.RuleDeny,
		Match:    v1.RuleMatch{Commands: []v1.CommandPattern{commandPattern(t, "git", "push"), commandPattern(t, "git", "reset")}},
		Examples: v1.RuleExamples{Match: []string{"git push origin", "ls && git reset --hard"}, NotMatch: []string{"git status"}},
	}
	askNetwork := v1.PolicyRule{
		Name: "ask-network", Action: v1.RuleAsk,
		Match: v1.RuleMatch{CEL: `"Network" in intent.categories`},
	}

	t.Run("a good policy is Ready", func(t *testing.T) {
		p := &v1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: ns},
			Spec:       v1.ToolPolicySpec{Rules: []v1.PolicyRule{denyPush, askNetwork}},
		}
		if err := env.Client.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		ready, status := waitForReady(t, p, func() v1.ToolPolicyStatus { return p.Status })
		if ready.Status != metav1.ConditionTrue || ready.Reason != v1.ReasonPolicyCompiled {
			t.Errorf("Ready = %s/%s (%s), want True/%s", ready.Status, ready.Reason, ready.Message, v1.ReasonPolicyCompiled)
		}
		if status.Rules != 2 {
			t.Errorf("status.rules = %d, want 2", status.Rules)
		}

		// Breaking the policy flips Ready for the new generation and names the rule.
		p.Spec.Rules[1].Match.CEL = `intent.categories.exists(c, c == )`
		if err := env.Client.Update(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		ready, status = waitForReady(t, p, func() v1.ToolPolicyStatus { return p.Status })
		if ready.Status != metav1.ConditionFalse || ready.Reason != v1.ReasonPolicyInvalid || !strings.Contains(ready.Message, `rule "ask-network": match.cel`) {
			t.Errorf("after breaking: Ready = %s/%s (%s)", ready.Status, ready.Reason, ready.Message)
		}
		if status.Rules != 0 {
			t.Errorf("a broken policy reports %d rules compiled, want 0", status.Rules)
		}
	})

	t.Run("a bad CEL expression is not Ready and names the rule", func(t *testing.T) {
		p := &v1.ToolPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "bad-cel", Namespace: ns},
			Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{denyPush, {
				Name: "broken-cel", Action: v1.RuleAsk, Match: v1.RuleMatch{CEL: `intent.tool == `},
			}}},
		}
		if err := env.Client.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		ready, _ := waitForReady(t, p, func() v1.ToolPolicyStatus { return p.Status })
		if ready.Status != metav1.ConditionFalse || ready.Reason != v1.ReasonPolicyInvalid {
			t.Errorf("Ready = %s/%s, want False/%s", ready.Status, ready.Reason, v1.ReasonPolicyInvalid)
		}
		if !strings.HasPrefix(ready.Message, `rule "broken-cel": match.cel: `) {
			t.Errorf("message %q does not name the rule and its CEL", ready.Message)
		}
	})

	t.Run("a failing example makes a ClusterToolPolicy not Ready", func(t *testing.T) {
		p := &v1.ClusterToolPolicy{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-example-"},
			Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{{
				Name: "deny-push", Action: v1.RuleDeny,
				Match:    v1.RuleMatch{Commands: []v1.CommandPattern{commandPattern(t, "git", "push", "--force")}},
				Examples: v1.RuleExamples{Match: []string{"git push origin"}},
			}}},
		}
		if err := env.Client.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) }) // t.Context is cancelled before cleanups run
		ready, _ := waitForReady(t, p, func() v1.ToolPolicyStatus { return p.Status })
		want := `rule "deny-push": example "git push origin" should match but does not`
		if ready.Status != metav1.ConditionFalse || ready.Reason != v1.ReasonPolicyInvalid || !strings.HasPrefix(ready.Message, want) {
			t.Errorf("Ready = %s/%s (%s), want False/%s starting %q", ready.Status, ready.Reason, ready.Message, v1.ReasonPolicyInvalid, want)
		}
	})

	t.Run("a good ClusterToolPolicy is Ready and its status is written once", func(t *testing.T) {
		p := &v1.ClusterToolPolicy{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "good-"},
			Spec:       v1.ToolPolicySpec{Rules: []v1.PolicyRule{denyPush}},
		}
		if err := env.Client.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) }) // t.Context is cancelled before cleanups run
		ready, status := waitForReady(t, p, func() v1.ToolPolicyStatus { return p.Status })
		if ready.Status != metav1.ConditionTrue || status.Rules != 1 {
			t.Fatalf("Ready = %s (%s), rules %d", ready.Status, ready.Message, status.Rules)
		}
		// Nothing changed, so nothing is written again: the resourceVersion stays,
		// through the reconcile of a controller started now, which reads it afresh.
		version := p.ResourceVersion
		again, _ := startManager(t, setupPolicies)
		absent(t, reconciledOnce(t, again, "clustertoolpolicy", p), "a status written again without a change", func() bool {
			got := &v1.ClusterToolPolicy{}
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
				t.Fatal(err)
			}
			return got.ResourceVersion != version
		})
	})
}
