package toolintent

// Event reasons of the intent pipeline, one per step.
const (
	EventValidated         = "Validated"
	EventValidationFailed  = "ValidationFailed"
	EventDecided           = "Decided"
	EventApprovalRequested = "ApprovalRequested"
	EventApprovalGranted   = "ApprovalGranted"
	EventApprovalDenied    = "ApprovalDenied"
	EventApprovalExpired   = "ApprovalExpired"
	EventApprovalRefused   = "ApprovalRefused"
	// EventGrantUsed: an asked call runs on an ApprovalGrant of its task (one of
	// its uses taken), without a new Approval.
	EventGrantUsed          = "GrantUsed"
	EventRedecided          = "Redecided"
	EventHeldForSiblings    = "HeldForSiblings"
	EventHeldForWorkspace   = "HeldForWorkspace"
	EventExecutionRequested = "ExecutionRequested"
	EventObserved           = "Observed"
	// EventResultChecked: result rules (when: Result) matched the call's output
	// before the model saw it; the note says what they did.
	EventResultChecked = "ResultChecked"
	// EventResultHeld: a Result rule's Ask holds the output from the model; an
	// Approval (request.result) asks a human to release it.
	EventResultHeld = "ResultHeld"
	// EventCancelled: the proposer cancelled the call (spec.cancel) before it ran;
	// an Approval it waited on is retired. A call cancelled while it ran is stopped
	// by its task (EventCallStopped) and observed Aborted.
	EventCancelled = "Cancelled"
	// EventObjectInTheWay: an object has the name a step needs (the intent's
	// Approval or Execution, an Execution's Job, NetworkPolicy or session pod) and is
	// not the one toolgate made for it; nothing runs.
	EventObjectInTheWay = "ObjectInTheWay"
)
