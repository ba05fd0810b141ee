package pipeline

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func votesOf(pairs ...string) []v1.ApprovalVote {
	var votes []v1.ApprovalVote
	for i := 0; i+1 < len(pairs); i += 2 {
		votes = append(votes, v1.ApprovalVote{User: pairs[i], Decision: v1.ApprovalDecision(pairs[i+1]), Comment: "from " + pairs[i]})
	}
	return votes
}

func TestCountVotes(t *testing.T) {
	const approved, denied = "Approved", "Denied"
	for _, tc := range []struct {
		name      string
		approvers *v1.Approvers
		votes     []v1.ApprovalVote
		want      Tally
	}{
		{name: "nobody voted", want: Tally{Required: 1}},
		{name: "one approval of one", votes: votesOf("alice", approved),
			want: Tally{Decision: v1.DecisionApproved, ApprovedBy: []string{"alice"}, Required: 1}},
		{name: "one deny of one", votes: votesOf("alice", denied),
			want: Tally{Decision: v1.DecisionDenied, DeniedBy: "alice", DenialComment: "from alice", Required: 1}},
		{name: "one approval of two decides nothing", approvers: &v1.Approvers{Required: 2}, votes: votesOf("alice", approved),
			want: Tally{ApprovedBy: []string{"alice"}, Required: 2}},
		{name: "two approvals of two", approvers: &v1.Approvers{Required: 2}, votes: votesOf("alice", approved, "carol", approved),
			want: Tally{Decision: v1.DecisionApproved, ApprovedBy: []string{"alice", "carol"}, Required: 2}},
		{name: "any deny denies, after an approval", approvers: &v1.Approvers{Required: 2}, votes: votesOf("alice", approved, "bob", denied),
			want: Tally{Decision: v1.DecisionDenied, ApprovedBy: []string{"alice"}, DeniedBy: "bob", DenialComment: "from bob", Required: 2}},
		{name: "any deny denies, even with enough approvals", approvers: &v1.Approvers{Required: 2}, votes: votesOf("alice", approved, "bob", denied, "carol", approved),
			want: Tally{Decision: v1.DecisionDenied, ApprovedBy: []string{"alice", "carol"}, DeniedBy: "bob", DenialComment: "from bob", Required: 2}},
		{name: "the first deny is the one reported", votes: votesOf("bob", denied, "dave", denied),
			want: Tally{Decision: v1.DecisionDenied, DeniedBy: "bob", DenialComment: "from bob", Required: 1}},
		{name: "the requester's approval never counts", approvers: &v1.Approvers{Required: 2}, votes: votesOf("agent-bot", approved, "alice", approved),
			want: Tally{ApprovedBy: []string{"alice"}, Required: 2}},
		{name: "the requester's deny never counts", votes: votesOf("agent-bot", denied),
			want: Tally{Required: 1}},
		{name: "a second vote of the same person never counts", approvers: &v1.Approvers{Required: 2}, votes: votesOf("alice", approved, "alice", approved),
			want: Tally{ApprovedBy: []string{"alice"}, Required: 2}},
		{name: "a person's later deny does not undo their approval", approvers: &v1.Approvers{Required: 2}, votes: votesOf("alice", approved, "alice", denied),
			want: Tally{ApprovedBy: []string{"alice"}, Required: 2}},
		{name: "a vote with no user never counts", votes: votesOf("", approved),
			want: Tally{Required: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &v1.Approval{Spec: v1.ApprovalSpec{RequestedBy: "agent-bot", Approvers: tc.approvers, Votes: tc.votes}}
			if diff := cmp.Diff(tc.want, CountVotes(a)); diff != "" {
				t.Errorf("CountVotes() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestApprovalStatusAtCountsQuorum: the status the Approval's reconciler records
// while votes come in: the tally and who approved, Pending until the quorum, and an
// expiry that says how far the votes got.
func TestApprovalStatusAtCountsQuorum(t *testing.T) {
	expires := epoch.Add(10 * time.Minute)
	a := &v1.Approval{Spec: v1.ApprovalSpec{RequestedBy: "agent-bot", ExpiresAt: metav1.NewTime(expires),
		Approvers: &v1.Approvers{Required: 2}, Votes: votesOf("alice", "Approved")}}

	st, recheck := ApprovalStatusAt(a, epoch)
	if st.State != v1.ApprovalStatePending || st.Tally != "1/2" || !cmp.Equal(st.ApprovedBy, []string{"alice"}) || st.DecidedAt != nil || recheck != 10*time.Minute {
		t.Fatalf("one approval of two: %s %s approved by %v, decidedAt %v, look again in %s; want Pending 1/2 by alice, undecided, in 10m", st.State, st.Tally, st.ApprovedBy, st.DecidedAt, recheck)
	}

	late, _ := ApprovalStatusAt(a, expires)
	if want := "not decided before 2025-03-01T12:10:00Z: 1 of 2 approvals (approved by alice)"; late.State != v1.ApprovalStateExpired || late.Message != want {
		t.Fatalf("at expiry: %s %q; want Expired %q", late.State, late.Message, want)
	}

	a.Spec.Votes = append(a.Spec.Votes, votesOf("carol", "Approved")...)
	st, _ = ApprovalStatusAt(a, epoch)
	if st.State != v1.ApprovalStateApproved || st.Tally != "2/2" || st.Message != "approved by alice, carol; the call runs once it is decided again against the policies in force" {
		t.Fatalf("two approvals of two: %s %s %q; want Approved 2/2 by alice, carol", st.State, st.Tally, st.Message)
	}

	a.Spec.Votes = append(votesOf("alice", "Approved"), votesOf("bob", "Denied")...)
	st, _ = ApprovalStatusAt(a, epoch)
	if st.State != v1.ApprovalStateDenied || st.DeniedBy != "bob" || st.Message != "denied by bob" {
		t.Fatalf("an approval then a deny: %s by %q %q; want Denied by bob", st.State, st.DeniedBy, st.Message)
	}
}
