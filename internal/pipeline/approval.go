package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
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
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…[%d more bytes not shown]", len(s)-cut)
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
	input := cutText(mask.Secrets(string(normalized)), maxApprovalInput)
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
				Tool:             intent.Spec.Tool,
				Input:            input,
				Risk:             d.Risk,
				Category:         d.Category,
				Policy:           d.Policy,
				PolicyGeneration: d.PolicyGeneration,
				Rule:             d.Rule,
				Reason:           cutText(mask.Secrets(d.Reason), maxApprovalReason),
				// Where the call will run: the approver approves it behind these walls,
				// and the fingerprint binds them.
				Walls:          d.Walls.DeepCopy(),
				Sandbox:        d.Sandbox.DeepCopy(),
				ProposerReason: cutText(mask.Secrets(intent.Spec.Reason), maxApprovalReason),
			},
			RequestedBy: intent.Spec.RequestedBy,
			ExpiresAt:   metav1.NewTime(now.Add(ttl)),
			Decision:    v1.DecisionPending,
		},
	}
	if len(d.Approvers.Users) > 0 || len(d.Approvers.Groups) > 0 {
		approvers := d.Approvers
		a.Spec.Approvers = &approvers
	}
	return a
}

// ApprovalVerdict is what an Approval means for its intent right now.
type ApprovalVerdict int

const (
	// VerdictWait: nobody decided and it has not expired.
	VerdictWait ApprovalVerdict = iota
	// VerdictApproved: approved and the fingerprint matches; the intent may execute.
	VerdictApproved
	// VerdictDenied: a human denied it.
	VerdictDenied
	// VerdictExpired: nobody decided before expiresAt.
	VerdictExpired
	// VerdictMismatch: approved, but for a different call than this intent now is.
	VerdictMismatch
	// VerdictConsumedElsewhere: the approval was used by another Execution.
	VerdictConsumedElsewhere
)

// JudgeApproval says what the Approval means for the intent. currentFingerprint is the
// fingerprint recomputed from the intent and the deciding policy's current generation:
// an approval given for another call, or under another version of the rule, is refused.
//
// Expiry comes first: a decision counts only when the controller saw it before
// expiresAt (status.decidedAt, which only the controller writes); a decision first
// seen at or after expiresAt is Expired, whatever it says. An approval already
// consumed by this Execution was decided in time and stays Approved.
func JudgeApproval(a *v1.Approval, currentFingerprint, executionName string, now time.Time) ApprovalVerdict {
	if a.Status.State == v1.ApprovalStateConsumed {
		if a.Status.ConsumedBy != executionName {
			return VerdictConsumedElsewhere
		}
		if a.Spec.Fingerprint != currentFingerprint {
			return VerdictMismatch
		}
		return VerdictApproved
	}
	if a.Status.State == v1.ApprovalStateExpired || !DecidedInTime(a, now) {
		return VerdictExpired
	}
	switch a.Spec.Decision {
	case v1.DecisionDenied:
		return VerdictDenied
	case v1.DecisionApproved:
		if a.Spec.Fingerprint != currentFingerprint {
			return VerdictMismatch
		}
		return VerdictApproved
	}
	return VerdictWait
}

// DecidedInTime says whether the approval can still count: a decision the controller
// saw before expiresAt, or no decision yet and the clock before expiresAt.
func DecidedInTime(a *v1.Approval, now time.Time) bool {
	if a.Status.DecidedAt != nil {
		return a.Status.DecidedAt.Before(&a.Spec.ExpiresAt)
	}
	return now.Before(a.Spec.ExpiresAt.Time)
}

// DeniedReason is the feedback for a denied approval, with the approver's comment.
func DeniedReason(a *v1.Approval) string {
	msg := fmt.Sprintf("Approval %s was denied by %s.", a.Name, a.Spec.DecidedBy)
	if a.Spec.Comment != "" {
		msg += " Their comment: " + a.Spec.Comment
	}
	return msg
}
