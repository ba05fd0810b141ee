package pipeline

import (
	"fmt"
	"strings"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Tally is what an Approval's votes decide, counted by CountVotes.
type Tally struct {
	// Decision is Approved when enough distinct people approved, Denied when one
	// counted vote denied, and empty while the votes decide nothing yet.
	Decision v1.ApprovalDecision
	// ApprovedBy are the people whose approvals count, in voting order.
	ApprovedBy []string
	// DeniedBy is the person whose Deny decided, and DenialComment their comment.
	DeniedBy      string
	DenialComment string
	// Required is how many approvals the approval needs.
	Required int
}

// Decided says whether the votes decide the approval either way.
func (t Tally) Decided() bool { return t.Decision != "" }

// String is the count for people and the Votes column: "1/2".
func (t Tally) String() string { return fmt.Sprintf("%d/%d", len(t.ApprovedBy), t.Required) }

// Voters names who approved, for messages: "alice, carol", or "nobody".
func (t Tally) Voters() string {
	if len(t.ApprovedBy) == 0 {
		return "nobody"
	}
	return strings.Join(t.ApprovedBy, ", ")
}

// CountVotes is the one count of an Approval's votes, with Tekton's semantics: a
// vote counts when it is the first of its user and the user is not the requester
// (admission refuses both, but the count does not rest on it); one counted Deny
// denies, whatever else was voted; otherwise the approval is Approved once
// approvers.required distinct people approved. Who may vote at all (the approve
// verb, the approvers list) is admission's to check, with the caller's identity,
// which a stored vote no longer carries.
func CountVotes(a *v1.Approval) Tally {
	t := Tally{Required: a.Spec.Approvers.Quorum()}
	seen := map[string]bool{}
	for _, vote := range a.Spec.Votes {
		if vote.User == "" || vote.User == a.Spec.RequestedBy || seen[vote.User] {
			continue
		}
		seen[vote.User] = true
		switch vote.Decision {
		case v1.DecisionDenied:
			if t.DeniedBy == "" {
				t.DeniedBy, t.DenialComment = vote.User, vote.Comment
			}
		case v1.DecisionApproved:
			t.ApprovedBy = append(t.ApprovedBy, vote.User)
		}
	}
	switch {
	case t.DeniedBy != "":
		t.Decision = v1.DecisionDenied
	case len(t.ApprovedBy) >= t.Required:
		t.Decision = v1.DecisionApproved
	}
	return t
}

// VoteOf is the user's vote on the approval, or nil when they have not voted.
func VoteOf(a *v1.Approval, user string) *v1.ApprovalVote {
	for i := range a.Spec.Votes {
		if a.Spec.Votes[i].User == user {
			return &a.Spec.Votes[i]
		}
	}
	return nil
}
