package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// voteAttempts bounds how often Vote reads the approval again when another vote
// landed between its read and its write.
const voteAttempts = 5

// Vote appends the user's vote to the approval, as the caller c authenticates: a
// JSON patch that adds one element to spec.votes, guarded by a test of the
// resourceVersion it was built on, so the vote is added to the votes the caller
// read and to nothing else. When another vote landed in between, it reads the
// approval again and retries a few times. The user must be the caller's own name
// (the admission policy compares it with the request's user); c may be any client
// that writes as that person (kubectl toolgate, or a console acting as its user).
// On success a is the approval as stored, with the vote.
func Vote(ctx context.Context, c client.Client, a *v1.Approval, user string, decision v1.ApprovalDecision, comment string) error {
	vote := v1.ApprovalVote{User: user, Decision: decision, Comment: comment}
	for attempt := 1; ; attempt++ {
		if mine := pipeline.VoteOf(a, user); mine != nil {
			return fmt.Errorf("you (%s) already voted %s on Approval %s; each person votes once and a vote is final", user, mine.Decision, a.Name)
		}
		patch, err := votePatch(a, vote)
		if err != nil {
			return err
		}
		read := a.ResourceVersion
		err = c.Patch(ctx, a, client.RawPatch(types.JSONPatchType, patch))
		if err == nil || !apierrors.IsInvalid(err) || attempt == voteAttempts {
			return apiError(err)
		}
		// A failed test operation is answered as Invalid with no detail, like a
		// vote the CRD refuses: it was the test when the approval changed since it
		// was read.
		if getErr := c.Get(ctx, client.ObjectKeyFromObject(a), a); getErr != nil {
			return apiError(getErr)
		}
		if a.ResourceVersion == read {
			return apiError(err)
		}
	}
}

// votePatch is the JSON patch that appends vote to the approval as read: a test of
// its resourceVersion, then an add at the end of spec.votes (or of the whole list,
// when there is none yet).
func votePatch(a *v1.Approval, vote v1.ApprovalVote) ([]byte, error) {
	ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": a.ResourceVersion}}
	if len(a.Spec.Votes) == 0 {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/votes", "value": []v1.ApprovalVote{vote}})
	} else {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/votes/-", "value": vote})
	}
	return json.Marshal(ops)
}

// VoteSummary says where the votes stand, for the voter: "1 of 2 approvals; voted:
// alice", what decided it, or what is still needed.
func VoteSummary(a *v1.Approval) string {
	t := pipeline.CountVotes(a)
	var voted []string
	for _, vote := range a.Spec.Votes {
		voted = append(voted, fmt.Sprintf("%s (%s)", vote.User, vote.Decision))
	}
	who := "nobody"
	if len(voted) > 0 {
		who = strings.Join(voted, ", ")
	}
	s := fmt.Sprintf("%d of %d approvals; voted: %s", len(t.ApprovedBy), t.Required, who)
	switch t.Decision {
	case v1.DecisionDenied:
		return s + "; denied by " + t.DeniedBy
	case v1.DecisionApproved:
		return s + "; approved"
	}
	return s + fmt.Sprintf("; %d more approval(s) needed", t.Required-len(t.ApprovedBy))
}
