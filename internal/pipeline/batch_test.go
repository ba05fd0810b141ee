package pipeline

import (
	"testing"

	"github.com/google/go-cmp/cmp"

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
