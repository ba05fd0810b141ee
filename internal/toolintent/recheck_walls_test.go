package toolintent

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

// A Result rule that comes into force while a call waits (for its approval, for its
// batch) keeps the call's output out of the workspace: the decision made again just
// before it runs says walls.noOutputCopy, and the call runs on the recorded decision
// with those walls, so the runner writes no copy for a later call to read. The call,
// and an approval given for it, are the same (the copy is not fingerprinted).
func TestRecheckKeepsTheOutputOutOfTheWorkspace(t *testing.T) {
	hold, err := policy.Compile(policy.KindToolPolicy, "review", 1, v1.ToolPolicySpec{Rules: []v1.PolicyRule{{
		Name: "readme", When: v1.WhenResult, Action: v1.RuleAsk, Approvers: v1.Approvers{Users: []string{"bob"}},
		Match: v1.RuleMatch{Tools: []v1.ToolName{v1.ToolReadFile}, CEL: `intent.input.path == 'README.md'`},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	now := policy.Decide(policy.Request{Namespace: "ns", Task: "t", Mode: v1.ModeEdit, Tool: v1.ToolReadFile,
		Input: json.RawMessage(`{"path":"README.md"}`)}, nil, []*policy.CompiledPolicy{hold}, nil)
	if now.Walls == nil || !now.Walls.NoOutputCopy {
		t.Fatalf("the rule in force keeps the copy out: %+v", now.Walls)
	}
	for _, tc := range []struct {
		name  string
		world func() *World
		goes  Action
	}{
		{"an allowed call", func() *World { return decidedWorld(v1.DecisionAllow) }, NameExecution},
		{"an approved Ask", func() *World { return askWorld(v1.ApprovalStateApproved) }, UseApproval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.world()
			recorded := w.Intent.Status.Decision.DeepCopy()
			re := *recorded.DeepCopy()
			re.Walls = now.Walls.DeepCopy()
			w.Rechecked = Known(&re)
			s := Next(w)
			if s.Do != Update || s.Change.Decision == nil {
				t.Fatalf("step %d %+v: the decision's walls are not updated", s.Do, s.Change)
			}
			d := s.Change.Decision
			if d.Walls == nil || !d.Walls.NoOutputCopy || !strings.Contains(d.Walls.Reason, "ToolPolicy/review/readme") {
				t.Fatalf("walls %+v", d.Walls)
			}
			if d.Action != recorded.Action || d.Fingerprint != recorded.Fingerprint || d.PolicyRuleRef != recorded.PolicyRuleRef {
				t.Fatalf("the call changed: %+v, was %+v", d, recorded)
			}
			Apply(w.Intent, s.Change, time.Now())
			if s = Next(w); s.Do != tc.goes {
				t.Fatalf("then step %d, want %d (%+v)", s.Do, tc.goes, s.Change)
			}
			w.Intent.Status.ExecutionName = "t-t1-0"
			exec, err := ownedExecution(w.Intent)
			if err != nil {
				t.Fatal(err)
			}
			if exec.Spec.Walls == nil || !exec.Spec.Walls.NoOutputCopy {
				t.Errorf("the Execution runs with walls %+v", exec.Spec.Walls)
			}
		})
	}
}
