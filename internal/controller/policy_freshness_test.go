package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Attack on the freshness rule at its call site: a policy applied a moment before an
// intent counts, even while other decisions keep shared policy LISTs in flight (the
// decision joins a LIST only if it began after the intent was read; policyset and
// TestLoadFreshNeverUsesAnEarlierList cover the sharing itself). Each round applies a
// new deny, alternately namespaced and cluster-wide, and proposes the call it denies
// at once; another task proposes allowed calls all along.
func TestPolicyAppliedJustBeforeCounts(t *testing.T) {
	p := startPipeline(t)
	// Every call of t is denied on purpose: room for that many refusals in a row.
	p.task("t", v1.ModeAuto, func(task *v1.AgentTask) { task.Spec.Budgets.MaxConsecutiveRefusals = 100 })
	p.task("busy", v1.ModeEdit)

	ctx, stop := context.WithCancel(t.Context())
	var load sync.WaitGroup
	load.Go(func() {
		for turn := int32(0); ctx.Err() == nil && turn < 200; turn++ {
			p.propose("busy", turn, 0, v1.ToolReadFile, `{"path":"a.txt"}`)
		}
	})
	defer func() { stop(); load.Wait() }()

	const rounds = 8
	for i := range rounds {
		marker := fmt.Sprintf("marker-%d", i)
		rule := v1.PolicyRule{
			Name: "deny-" + marker, Action: v1.RuleDeny, Reason: "applied a moment before the call",
			Match: v1.RuleMatch{Commands: []v1.CommandPattern{commandPattern(t, "echo", marker)}},
		}
		want := ""
		if i%2 == 0 {
			want = "ToolPolicy/" + p.policy("fresh-"+marker, rule).Name + "/" + rule.Name
		} else {
			want = "ClusterToolPolicy/" + p.clusterPolicy("fresh-"+marker, rule).Name + "/" + rule.Name
		}
		p.propose("t", int32(i), 0, v1.ToolBash, fmt.Sprintf(`{"command":"echo %s"}`, marker)) //nolint:gosec // i < rounds
		expectObservation(t, p.observed(fmt.Sprintf("t-t%d-0", i)), v1.OutcomeDenied, false, -1, want)
	}
}
