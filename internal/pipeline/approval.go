package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/mask"
)

// maxApprovalInput bounds the input summary shown to the approver (the CRD allows 8 KiB).
const maxApprovalInput = 8000

// maxApprovalReason leaves room for the cut notice under the CRD's 4096.
const maxApprovalReason = 4000

// cutText keeps at most max bytes of s and says how much was left out. It cuts on a
// rune boundary: half a UTF-8 character would reach the approver as a replacement
// character.
func cutText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	kept := clip.Bytes(s, max)
	return kept + fmt.Sprintf("…[%d more bytes not shown]", len(s)-len(kept))
}

// ApprovalName is the deterministic name of the Approval the intent's decision in
// force asks, so a repeated create is AlreadyExists, never a second request. The
// first Ask of an intent is asked by an Approval of the intent's own name. When a
// re-check just before the call runs asks again (Stricter: another rule asks), the
// earlier Approval is retired (Superseded) and kept as the record of what was
// approved, and the new Ask gets a name of its own: NAME-ask-N for the intent's
// N-th asking decision. An Approval of that name that is not the intent's (by UID)
// is in the way, as for the first.
func ApprovalName(intent *v1.ToolIntent) string {
	asked := 0
	for _, d := range intent.Status.SupersededDecisions {
		if d.Action == v1.DecisionAsk {
			asked++
		}
	}
	if asked == 0 {
		return intent.Name
	}
	suffix := fmt.Sprintf("-ask-%d", asked+1)
	name := intent.Name
	if max := maxObjectName - len(suffix); len(name) > max {
		name = strings.TrimRight(name[:max], "-.")
	}
	return name + suffix
}

// maxObjectName is the longest name of an object (a DNS subdomain).
const maxObjectName = 253

// BuildApproval is the Approval an Ask decision creates: what is asked (secrets masked)
// and behind which walls and in which sandbox it will run, who asked, who may decide, until when, bound to
// the decision's fingerprint.
func BuildApproval(intent *v1.ToolIntent, d *v1.Decision, normalized json.RawMessage, ttl time.Duration, now time.Time) *v1.Approval {
	input := cutText(mask.Command(string(normalized)), maxApprovalInput)
	a := &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ApprovalName(intent),
			Namespace: intent.Namespace,
			Labels:    ChildLabels(intent),
		},
		Spec: v1.ApprovalSpec{
			IntentRef:   v1.LocalObjectReference{Name: intent.Name},
			TaskRef:     intent.Spec.TaskRef,
			Fingerprint: d.Fingerprint,
			Request: v1.ApprovalRequest{
				Tool:          intent.Spec.Tool,
				Input:         input,
				Risk:          d.Risk,
				Category:      d.Category,
				PolicyRuleRef: d.PolicyRuleRef,
				Reason:        cutText(mask.Secrets(d.Reason), maxApprovalReason),
				// Where the call will run: the approver approves it behind these walls,
				// and the fingerprint binds them.
				Walls:          d.Walls.DeepCopy(),
				Sandbox:        d.Sandbox.DeepCopy(),
				ProposerReason: cutText(mask.Secrets(intent.Spec.Reason), maxApprovalReason),
			},
			RequestedBy: intent.Spec.RequestedBy,
			ExpiresAt:   metav1.NewTime(now.Add(ttl)),
		},
	}
	if !d.Approvers.IsEmpty() {
		approvers := d.Approvers
		a.Spec.Approvers = &approvers
	}
	return a
}

// ApprovalVerdict is what an Approval means for its intent right now.
type ApprovalVerdict int

const (
	// VerdictWait: the Approval's reconciler has recorded no decision and no expiry
	// yet (nobody decided, or the decision is not seen yet).
	VerdictWait ApprovalVerdict = iota
	// VerdictApproved: approved and the fingerprint matches; the intent may execute.
	VerdictApproved
	// VerdictDenied: a human denied it.
	VerdictDenied
	// VerdictExpired: nobody decided before expiresAt (a decision first seen later
	// does not count).
	VerdictExpired
	// VerdictMismatch: approved, but for a different call than this intent now is.
	VerdictMismatch
	// VerdictConsumedElsewhere: the approval was used by another Execution.
	VerdictConsumedElsewhere
	// VerdictSuperseded: the intent's reconcile retired it when the call was decided
	// again (and may not have recorded that yet): it is never used, the call is
	// decided again.
	VerdictSuperseded
)

// ApprovalStatusAt is the status the Approval's reconciler records for it at now,
// and how long until it must look again (0: only a change of the Approval matters).
// It holds the approval rules of time and decision, in one place:
//
//   - A new Approval is Pending. While it is, the votes are counted (CountVotes)
//     into status.tally, approvedBy and deniedBy at every look; they decide once
//     one counted vote denies or approvers.required people approved.
//   - Expiry first: a decision counts only when the controller saw it before
//     expiresAt. The first time it is seen is recorded in status.decidedAt (only
//     the controller writes status); seen in time, the Approval becomes Approved or
//     Denied; seen at or after expiresAt, it is Expired, whatever it says.
//   - The votes decided nothing and the clock reached expiresAt: Expired.
//   - Approved, Denied, Expired, Consumed and Superseded are not changed here: an
//     Approved approval is consumed (or superseded) by its intent's reconcile, at
//     the moment the call runs (or is decided again), with a compare-and-swap.
func ApprovalStatusAt(a *v1.Approval, now time.Time) (v1.ApprovalStatus, time.Duration) {
	st := *a.Status.DeepCopy()
	if st.State != "" && st.State != v1.ApprovalStatePending {
		return st, 0
	}
	st.State = v1.ApprovalStatePending
	expires := a.Spec.ExpiresAt.UTC().Format(time.RFC3339)
	t := CountVotes(a)
	st.Tally, st.ApprovedBy, st.DeniedBy = t.String(), t.ApprovedBy, t.DeniedBy
	if !t.Decided() {
		if now.Before(a.Spec.ExpiresAt.Time) {
			return st, a.Spec.ExpiresAt.Sub(now)
		}
		st.State = v1.ApprovalStateExpired
		st.Message = "nobody decided before " + expires
		if t.Required > 1 {
			st.Message = fmt.Sprintf("not decided before %s: %d of %d approvals (approved by %s)", expires, len(t.ApprovedBy), t.Required, t.Voters())
		}
		return st, 0
	}
	if st.DecidedAt == nil {
		seen := metav1.NewTime(now)
		st.DecidedAt = &seen
	}
	if !st.DecidedAt.Before(&a.Spec.ExpiresAt) {
		st.State = v1.ApprovalStateExpired
		st.Message = fmt.Sprintf("%s by %s, but first seen by the controller at %s, not before expiresAt %s: a late decision does not count; the call was not run",
			t.Decision, decidersOf(t), st.DecidedAt.UTC().Format(time.RFC3339), expires)
		return st, 0
	}
	if t.Decision == v1.DecisionDenied {
		st.State = v1.ApprovalStateDenied
		st.Message = "denied by " + t.DeniedBy
		return st, 0
	}
	st.State = v1.ApprovalStateApproved
	st.Message = "approved by " + t.Voters() + "; the call runs once it is decided again against the policies in force"
	return st, 0
}

// decidersOf names who decided: the denier, or those who approved.
func decidersOf(t Tally) string {
	if t.Decision == v1.DecisionDenied {
		return t.DeniedBy
	}
	return t.Voters()
}

// JudgeApproval says what the Approval means for the intent, from the state its
// reconciler recorded (ApprovalStatusAt) and the call as it is now.
// currentFingerprint is the fingerprint recomputed from the intent and the deciding
// policy's current generation: an approval given for another call, or under another
// version of the rule, is refused. An approval already consumed by this Execution
// stays Approved (a restart between consuming it and recording the Execution).
func JudgeApproval(a *v1.Approval, currentFingerprint, executionName string) ApprovalVerdict {
	switch a.Status.State {
	case v1.ApprovalStateConsumed:
		if a.Status.ConsumedByExecutionName != executionName {
			return VerdictConsumedElsewhere
		}
		if a.Spec.Fingerprint != currentFingerprint {
			return VerdictMismatch
		}
		return VerdictApproved
	case v1.ApprovalStateApproved:
		// The state is the controller's record; it is believed only with what it
		// rests on (a human's Approved seen before expiresAt).
		if CountVotes(a).Decision != v1.DecisionApproved || a.Status.DecidedAt == nil || !a.Status.DecidedAt.Before(&a.Spec.ExpiresAt) {
			return VerdictExpired
		}
		if a.Spec.Fingerprint != currentFingerprint {
			return VerdictMismatch
		}
		return VerdictApproved
	case v1.ApprovalStateDenied:
		return VerdictDenied
	case v1.ApprovalStateExpired:
		return VerdictExpired
	case v1.ApprovalStateSuperseded:
		return VerdictSuperseded
	}
	return VerdictWait
}

// DeniedReason is the feedback for a denied approval, with the denier's comment.
func DeniedReason(a *v1.Approval) string {
	t := CountVotes(a)
	msg := fmt.Sprintf("Approval %s was denied by %s.", a.Name, t.DeniedBy)
	if t.DenialComment != "" {
		msg += " Their comment: " + t.DenialComment
	}
	return msg
}
