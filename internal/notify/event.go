package notify

import (
	"time"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Outcome is an Approval's decision as a message tells it. It is read in one place,
// EventOf, so that a change of how decisions are recorded (votes instead of one
// decider) changes this package here alone.
type Outcome struct {
	// Event is the moment the Approval is at.
	Event v1.NotificationEvent
	// Decision is Approved or Denied for EventDecided, else empty.
	Decision v1.ApprovalDecision
	// DecidedBy names who decided, for EventDecided.
	DecidedBy []string
	// Comment is the decider's comment, untrusted.
	Comment string
}

// EventOf says which event an Approval's recorded state announces; false while the
// controller has recorded no state yet. Consumed announces Decided: the call ran
// on an approval, and a channel that has not heard of the decision still should.
func EventOf(a *v1.Approval) (Outcome, bool) {
	switch a.Status.State {
	case v1.ApprovalStatePending:
		return Outcome{Event: v1.EventRequested}, true
	case v1.ApprovalStateApproved, v1.ApprovalStateDenied, v1.ApprovalStateConsumed:
		t := pipeline.CountVotes(a)
		o := Outcome{Event: v1.EventDecided, Decision: t.Decision, DecidedBy: t.ApprovedBy}
		if t.Decision == v1.DecisionDenied {
			o.DecidedBy, o.Comment = []string{t.DeniedBy}, t.DenialComment
		}
		return o, true
	case v1.ApprovalStateExpired:
		return Outcome{Event: v1.EventExpired}, true
	case v1.ApprovalStateSuperseded:
		return Outcome{Event: v1.EventSuperseded}, true
	}
	return Outcome{}, false
}

// Wants says whether a channel announces event: a channel with no events listed
// announces all of them.
func Wants(ch *v1.NotificationChannel, event v1.NotificationEvent) bool {
	if len(ch.Spec.Events) == 0 {
		return true
	}
	for _, e := range ch.Spec.Events {
		if e == event {
			return true
		}
	}
	return false
}

// Before says whether an Approval's event happened before a channel existed, so the
// channel does not announce it: a channel created later hears what still waits for
// a person (Requested) and what happens from then on, not the history of every
// Approval in its reach, which a restart or a leader change would otherwise send it
// all at once. Decided counts from status.decidedAt, Expired from spec.expiresAt;
// Superseded records no time, and counts from the Approval's creation.
func Before(a *v1.Approval, event v1.NotificationEvent, channelCreated time.Time) bool {
	var at time.Time
	switch event {
	case v1.EventRequested:
		return false
	case v1.EventDecided:
		if a.Status.DecidedAt == nil {
			return false
		}
		at = a.Status.DecidedAt.Time
	case v1.EventExpired:
		at = a.Spec.ExpiresAt.Time
	default:
		at = a.CreationTimestamp.Time
	}
	return at.Before(channelCreated)
}
