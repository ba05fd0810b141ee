// Package failpoint ends the process at a named step boundary of the pipeline, so
// that the kill-point tests can stop the controller exactly where a crash would hurt
// most (after a side effect, before the status write that records it).
//
// Only a binary built with the build tag "failpoints" has them: there,
// TOOLGATE_FAILPOINT=NAME ends the process with exit code ExitCode the first time
// the step NAME is reached, and NAME:N the N-th time. In every other build Reached is
// an empty function and the variable is never read.
package failpoint

// The step boundaries, in pipeline order.
const (
	// Validated: the intent's validation was recorded.
	Validated = "validated"
	// Decided: the intent's decision was recorded.
	Decided = "decided"
	// ApprovalCreated: the Approval was created, before the intent records it.
	ApprovalCreated = "approval-created"
	// ApprovalConsumed: the Approval was consumed, before the Execution exists.
	ApprovalConsumed = "approval-consumed"
	// ExecutionNamed: the intent names its Execution, which is not created yet.
	ExecutionNamed = "execution-named"
	// ExecutionCreated: the Execution was created, before the intent records that
	// it runs.
	ExecutionCreated = "execution-created"
	// JobCreated: the Job was created, before the Execution records it.
	JobCreated = "job-created"
	// ResultRead: the Execution's result was recorded.
	ResultRead = "result-read"
	// Observed: the intent's observation was recorded.
	Observed = "observed"
)

// The step boundaries of the record's life (docs/archive.md), in order: they are
// reached only by a controller with an archive.
const (
	// ArchiveStored: a call's record was stored, before the archiver's reconcile
	// returns (its work queue has not forgotten the call).
	ArchiveStored = "archive-stored"
	// RetireCounted: the task's history counts the calls to retire, none of which
	// is deleted yet.
	RetireCounted = "retire-counted"
	// RetireChildrenDeleted: a retiring call's Approval and Execution were deleted,
	// its intent not yet.
	RetireChildrenDeleted = "retire-children-deleted"
	// TaskRecordStored: an expired task's record was stored, the task not yet
	// deleted.
	TaskRecordStored = "task-record-stored"
)

// ArchivePoints are the record's step boundaries.
var ArchivePoints = []string{ArchiveStored, RetireCounted, RetireChildrenDeleted, TaskRecordStored}

// Points are all step boundaries of the pipeline, in pipeline order.
var Points = []string{Validated, Decided, ApprovalCreated, ApprovalConsumed, ExecutionNamed, ExecutionCreated, JobCreated, ResultRead, Observed}

// ExitCode is the exit code of a process ended by a failpoint.
const ExitCode = 86

// EnvVar names the failpoint to end the process at.
const EnvVar = "TOOLGATE_FAILPOINT"
