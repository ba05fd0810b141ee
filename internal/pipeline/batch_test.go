package pipeline

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func TestAwaitsApproval(t *testing.T) {
	cases := []struct {
		name   string
		intent *v1.ToolIntent
		want   bool
	}{
		{name: "undecided", intent: makeIntent("i").obj()},
		{name: "allowed", intent: makeIntent("i").decided(v1.DecisionAllow).obj()},
		{name: "denied by policy", intent: makeIntent("i").decided(v1.DecisionDeny).observed(v1.OutcomeDenied).obj()},
		{name: "ask, pending", intent: makeIntent("i").decided(v1.DecisionAsk).obj(), want: true},
		{name: "ask, approved", intent: makeIntent("i").decided(v1.DecisionAsk).approved().obj()},
		{name: "ask, executing", intent: makeIntent("i").decided(v1.DecisionAsk).executing().obj()},
		{name: "ask, refused by a human", intent: makeIntent("i").decided(v1.DecisionAsk).observed(v1.OutcomeApprovalDenied).obj()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := AwaitsApproval(tc.intent); got != tc.want {
				t.Errorf("AwaitsApproval() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBlockingSiblings(t *testing.T) {
	self := makeIntent("t-t1-0").turn(1).decided(v1.DecisionAllow).obj()
	cases := []struct {
		name     string
		siblings []v1.ToolIntent
		want     []string
	}{
		{name: "alone", siblings: []v1.ToolIntent{*self}},
		{
			name:     "self is excluded even while undecided",
			siblings: []v1.ToolIntent{makeIntent("t-t1-0").turn(1).val()},
		},
		{
			name:     "an undecided sibling blocks: it may become an Ask",
			siblings: []v1.ToolIntent{*self, makeIntent("t-t1-1").turn(1).index(1).val()},
			want:     []string{"t-t1-1"},
		},
		{
			name:     "an Ask waiting for a human blocks",
			siblings: []v1.ToolIntent{*self, makeIntent("t-t1-1").turn(1).index(1).decided(v1.DecisionAsk).val()},
			want:     []string{"t-t1-1"},
		},
		{
			name: "decided, approved, executing and observed siblings do not block",
			siblings: []v1.ToolIntent{
				*self,
				makeIntent("t-t1-1").turn(1).index(1).decided(v1.DecisionAllow).val(),
				makeIntent("t-t1-2").turn(1).index(2).decided(v1.DecisionAsk).approved().val(),
				makeIntent("t-t1-3").turn(1).index(3).decided(v1.DecisionAsk).executing().val(),
				makeIntent("t-t1-4").turn(1).index(4).decided(v1.DecisionAsk).observed(v1.OutcomeApprovalExpired).val(),
				makeIntent("t-t1-5").turn(1).index(5).decided(v1.DecisionDeny).observed(v1.OutcomeDenied).val(),
				// A validation failure is observed without a decision.
				makeIntent("t-t1-6").turn(1).index(6).observed(v1.OutcomeValidationFailed).val(),
			},
		},
		{
			name: "other turns and other tasks are ignored",
			siblings: []v1.ToolIntent{
				*self,
				makeIntent("t-t0-0").turn(0).val(),
				makeIntent("t-t2-0").turn(2).decided(v1.DecisionAsk).val(),
				makeIntent("u-t1-0").task("u").turn(1).decided(v1.DecisionAsk).val(),
			},
		},
		{
			name: "all blockers are named, in the order given",
			siblings: []v1.ToolIntent{
				makeIntent("t-t1-3").turn(1).index(3).decided(v1.DecisionAsk).val(),
				*self,
				makeIntent("t-t1-1").turn(1).index(1).val(),
				makeIntent("t-t1-2").turn(1).index(2).decided(v1.DecisionAllow).val(),
			},
			want: []string{"t-t1-3", "t-t1-1"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, BlockingSiblings(self, tc.siblings)); diff != "" {
				t.Errorf("BlockingSiblings() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTurnSiblingsKeepOutOthers: an intent another user created under the same
// task and turn, or one left by an earlier task of the same name, neither fills an
// index turnCalls announces nor consumes the turn.
func TestTurnSiblingsKeepOutOthers(t *testing.T) {
	mine := func(name string, index int32) v1.ToolIntent {
		return v1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.ToolIntentSpec{
			TaskRef: v1.LocalObjectReference{Name: "fix"}, Turn: 3, Index: index, TurnCalls: 3, RequestedBy: "agent"}}
	}
	first := mine("fix-t3-0", 0)
	planted := mine("planted-1", 1)
	planted.Spec.RequestedBy = "mallory"
	planted.Status.Decision = &v1.Decision{Action: v1.DecisionStop}
	orphan := mine("old-2", 2)
	orphan.OwnerReferences = []metav1.OwnerReference{{APIVersion: "toolgate.dev/v1alpha1", Kind: "AgentTask", Name: "fix", UID: "earlier", Controller: ptr(true)}}
	earlier := mine("old-decided-2", 2)
	earlier.Status.Decision = &v1.Decision{Action: v1.DecisionRedirect, Sandbox: &v1.DecidedSandbox{TaskUID: "earlier"}}

	turn := TurnSiblings(&first, []v1.ToolIntent{first, planted, orphan, earlier}, "now")
	if len(turn) != 1 || turn[0].Name != first.Name {
		t.Fatalf("batch %v; want only the intent itself", names(turn))
	}
	if missing := MissingSiblings(&first, turn); len(missing) != 2 || missing[0] != 1 || missing[1] != 2 {
		t.Errorf("missing %v; want [1 2]: planted and orphaned intents fill no place", missing)
	}
	if by := TurnConsumer(turn); by != nil {
		t.Errorf("the turn is consumed by %s, which is not part of it", by.Name)
	}
	// Without the filter the planted Stop would consume the turn: the test is about it.
	if by := TurnConsumer([]v1.ToolIntent{first, planted}); by == nil || by.Name != "planted-1" {
		t.Fatalf("TurnConsumer over the unfiltered list = %v", by)
	}
}

func names(in []v1.ToolIntent) []string {
	var out []string
	for _, i := range in {
		out = append(out, i.Name)
	}
	return out
}
