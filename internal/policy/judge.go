package policy

import "github.com/toolgate/toolgate/api/v1alpha1"

// JudgeRule is a rule whose match.judge condition a judge model is to evaluate for a
// call: a DryRun rule whose every other condition matched it.
type JudgeRule struct {
	Ref v1alpha1.PolicyRuleReference
	// Action is what the rule would do if it acted.
	Action    v1alpha1.RuleAction
	Condition string
}

// JudgeCandidates are the rules of d's non-acting hits that carry a judge
// condition, in the order d recorded them: the deterministic conditions narrowed
// the candidates, and only these go to the judge. d must have been decided against
// the same policies.
func JudgeCandidates(d v1alpha1.Decision, cluster, namespaced []*CompiledPolicy) []JudgeRule {
	byID := map[string]*CompiledPolicy{}
	for _, group := range [][]*CompiledPolicy{cluster, namespaced} {
		for _, p := range group {
			byID[p.ID()] = p
		}
	}
	var out []JudgeRule
	for _, h := range d.NonActingHits {
		p := byID[h.PolicyRuleRef.Policy()]
		if p == nil || h.Enforcement != v1alpha1.EnforcementDryRun {
			continue
		}
		for _, r := range p.rules {
			if r.spec.Name == h.PolicyRuleRef.Rule && r.spec.Match.Judge != nil {
				out = append(out, JudgeRule{Ref: h.PolicyRuleRef, Action: r.spec.Action, Condition: r.spec.Match.Judge.Condition})
			}
		}
	}
	return out
}
