package toolintent

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Action is what a Step asks the reconciler to do.
type Action int

const (
	// Read: read the fact Need names into the World, and ask Next again.
	Read Action = iota
	// Update: apply Change, and ask Next again.
	Update
	// End: apply Change; this reconcile is done (its status is written, and
	// RequeueAfter says when to look again).
	End
	// RequestApproval: create Approval (owned by the intent), apply Change, end.
	RequestApproval
	// UseApproval: record Retire (the Approval consumed by the Execution) with a
	// compare-and-swap; a conflict ends the reconcile to look again in a second.
	// Then apply Change, set World.ApprovalUsed, and ask Next again.
	UseApproval
	// UseGrant: take one use of Grant (a compare-and-swap on the version read: a
	// conflict, or a grant deleted meanwhile, ends the reconcile to look again in a
	// second). Then apply Change, which records the use on the decision, and ask
	// Next again.
	UseGrant
	// NameExecution: apply Change, which names the Execution, and write the status
	// now (a compare-and-swap; a conflict ends the reconcile); then set
	// World.ExecutionNamed and ask Next again.
	NameExecution
	// CreateExecution: create Execution (owned by the intent). Created: set
	// World.ExecutionCreated; AlreadyExists: read the existing one into
	// World.ExistingExecution. Ask Next again.
	CreateExecution
	// Fail: the intent is in a state nothing moves on from; return Err.
	Fail
)

// Need names a fact of the World.
type Need int

const (
	NeedNothing Need = iota
	NeedTask
	NeedTaskIntents
	NeedStops
	NeedDecided
	NeedOtherApprovals
	NeedTurn
	NeedApproval
	NeedFingerprint
	NeedRechecked
	NeedExecution
	NeedStale
	NeedFinishedExecution
	NeedGrants
	NeedResultPolicies
	NeedResultApproval
)

// Step is the one thing to do next.
type Step struct {
	Do Action
	// Need is the fact to read (Read); for NeedApproval, ApprovalName names it and
	// FromAPIServer says it must be read around the cache (an Approval about to be
	// retired: the write is a compare-and-swap on the version read).
	Need          Need
	ApprovalName  string
	FromAPIServer bool
	// Change is recorded in the intent's status (every Action but Read and Fail).
	Change Change
	// Retire is an Approval status write to make before Change is recorded.
	Retire *Retirement
	// Approval to create (RequestApproval).
	Approval *v1.Approval
	// Grant to take a use of (UseGrant), with the use it takes.
	Grant *GrantUse
	// Execution to create (CreateExecution).
	Execution *v1.Execution
	// RequeueAfter is when to look again after End.
	RequeueAfter time.Duration
	// Err is why the intent cannot go on (Fail).
	Err error
}

// Retirement is the end of an Approval: used (Consumed by an Execution),
// Superseded, or kept Approved with the reason the controller refused it.
type Retirement struct {
	Approval   *v1.Approval
	State      v1.ApprovalState
	ConsumedBy string
	Message    string
}

// GrantUse is one use of an ApprovalGrant: its status as it is once the use is
// taken, written with a compare-and-swap on the version read.
type GrantUse struct {
	Grant *v1.ApprovalGrant
}

// Change is what a step records in the intent's status, applied in field order.
type Change struct {
	Validation *v1.Validation
	// Decision is the first decision, recorded.
	Decision *v1.Decision
	// Supersede is a decision made again that replaces the one in force
	// (pipeline.Supersede; replaced in place when the intent was decided
	// MaxDecisions times already).
	Supersede *v1.Decision
	// ApprovalName and ExecutionName, when set, are recorded as they are ("" clears).
	ApprovalName  *string
	ExecutionName *string
	// GrantRef records, on the decision in force, the grant use that allows it.
	GrantRef   *v1.GrantReference
	Conditions []metav1.Condition
	// Observation ends the intent (Observed), with the event that says so.
	Observation *v1.Observation
	Events      []Event
	// Counted is a decision to count in the decisions metric; FirstDecision says it
	// is the intent's first (the decide latency is measured).
	Counted       *v1.Decision
	FirstDecision bool
	// Ran is the finished Execution the observation was made from (its duration is
	// measured).
	Ran *v1.Execution
	// Dispatched: an allowed call's Execution was created (the dispatch latency is
	// measured).
	Dispatched bool
}

// Event is one step of the pipeline as an Event and an audit line, emitted only
// after the status write that records it succeeded.
type Event struct {
	Reason  string
	Warning bool
	// Related is the Approval the step concerns, if any.
	Related *v1.Approval
	Note    string
	// AuditOnly steps are written to the audit log but send no Event: the steps of an
	// allowed call before it runs (validated, allowed, Execution requested) are in
	// its status and the log, and an Event each would be a write on the path to its
	// Job. Its Observed event says how it was decided.
	AuditOnly bool
}

func event(reason string, warning bool, related *v1.Approval, format string, args ...any) Event {
	return Event{Reason: reason, Warning: warning, Related: related, Note: mask.Secrets(fmt.Sprintf(format, args...))}
}

func audit(reason string, format string, args ...any) Event {
	e := event(reason, false, nil, format, args...)
	e.AuditOnly = true
	return e
}

// Condition is a condition of the intent, its message masked and bounded.
func Condition(intent *v1.ToolIntent, typ string, status bool, reason, message string) metav1.Condition {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: truncate(mask.Secrets(message), 32000), ObservedGeneration: intent.Generation}
	if status {
		c.Status = metav1.ConditionTrue
	}
	return c
}

// Apply records change in the intent's status. now stamps the conditions that flip.
func Apply(intent *v1.ToolIntent, change Change, now time.Time) {
	st := &intent.Status
	if change.Validation != nil {
		st.Validation = change.Validation
	}
	if change.Decision != nil {
		st.Decision = change.Decision
	}
	if d := change.Supersede; d != nil {
		if !pipeline.Supersede(intent, d) {
			st.Decision = d
		}
	}
	if change.ApprovalName != nil {
		st.ApprovalName = *change.ApprovalName
	}
	if change.ExecutionName != nil {
		st.ExecutionName = *change.ExecutionName
	}
	if change.GrantRef != nil && st.Decision != nil {
		st.Decision.GrantRef = change.GrantRef
	}
	for _, c := range change.Conditions {
		c.LastTransitionTime = metav1.NewTime(now)
		meta.SetStatusCondition(&st.Conditions, c)
	}
	if change.Observation != nil {
		st.Observation = change.Observation
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
