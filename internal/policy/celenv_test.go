package policy

import (
	"strings"
	"testing"

	"github.com/google/cel-go/cel"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// testCELEnvironment is the environment of toolgate.dev/v1alpha1, for tests that
// compile one rule or one expression.
func testCELEnvironment(t testing.TB) celEnvironment {
	t.Helper()
	env, err := celEnvironmentFor(v1alpha1.GroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestCELEnvironmentFollowsTheAPIVersion: a policy's expressions are compiled against
// the environment of the apiVersion it was written for. A second version that
// declares other variables (here `call` for `intent`) compiles its own policies and
// changes nothing of what a v1alpha1 policy means; a version with no environment is
// refused, naming it.
func TestCELEnvironmentFollowsTheAPIVersion(t *testing.T) {
	const next = "toolgate.dev/v1next"
	celEnvironments[next] = func() (celEnvironment, error) {
		toolCall, err := cel.NewEnv(cel.Variable("call", cel.MapType(cel.StringType, cel.DynType)))
		return celEnvironment{toolCall: toolCall}, err
	}
	t.Cleanup(func() { delete(celEnvironments, next) })

	policyOf := func(expr string) v1alpha1.ToolPolicySpec {
		return v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{{
			Name: "deny-deletes", Action: v1alpha1.RuleDeny, Reason: "no deletes",
			Match:    v1alpha1.RuleMatch{CEL: expr},
			Examples: v1alpha1.RuleExamples{Match: []string{"rm -r x"}, NotMatch: []string{"ls"}},
		}}}
	}
	v1alpha1Expr := `"Delete" in intent.categories`
	p, err := CompileFor(v1alpha1.GroupVersion.String(), KindToolPolicy, "p", 1, policyOf(v1alpha1Expr))
	if err != nil {
		t.Fatalf("a v1alpha1 policy over intent: %v", err)
	}
	if d := Decide(bashCall(v1alpha1.ModeAuto, "rm -r x"), nil, []*CompiledPolicy{p}, nil); d.Action != v1alpha1.DecisionDeny {
		t.Errorf("the v1alpha1 policy decided %s for rm -r x, want Deny", d.Action)
	}
	if _, err := CompileFor(next, KindToolPolicy, "p", 1, policyOf(v1alpha1Expr)); err == nil || !strings.Contains(err.Error(), "undeclared reference to 'intent'") {
		t.Errorf("a v1alpha1 expression under %s: err %v, want intent undeclared", next, err)
	}
	if _, err := CompileFor(next, KindToolPolicy, "p", 1, v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{{Name: "r", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{CEL: `call.tool == "bash"`}}}}); err != nil {
		t.Errorf("a %s expression over call: %v", next, err)
	}
	if _, err := Compile(KindToolPolicy, "p", 1, v1alpha1.ToolPolicySpec{Rules: []v1alpha1.PolicyRule{{Name: "r", Action: v1alpha1.RuleDeny, Match: v1alpha1.RuleMatch{CEL: `call.tool == "bash"`}}}}); err == nil || !strings.Contains(err.Error(), "undeclared reference to 'call'") {
		t.Errorf("a %s expression in a v1alpha1 policy: err %v, want call undeclared", next, err)
	}

	_, err = CompileFor("toolgate.dev/v2", KindClusterToolPolicy, "strict", 1, policyOf(v1alpha1Expr))
	for _, want := range []string{`ClusterToolPolicy/strict`, `apiVersion "toolgate.dev/v2" has no CEL environment`, v1alpha1.GroupVersion.String()} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a policy of an unknown apiVersion: err %v, want it to say %q", err, want)
		}
	}
}
