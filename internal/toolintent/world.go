package toolintent

import (
	"encoding/json"
	"time"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/policy"
)

// Fact is something read around the intent in this reconcile. Known is false until
// it was read; a Known fact with a nil Value is a read that found nothing.
type Fact[T any] struct {
	Known bool
	Value T
}

// Set records a fact as read.
func (f *Fact[T]) Set(v T) { f.Known, f.Value = true, v }

// Known makes a known fact (for tests and the reconciler's reads).
func Known[T any](v T) Fact[T] { return Fact[T]{Known: true, Value: v} }

// NamedApproval is an Approval read by name; Value is nil when none exists.
type NamedApproval struct {
	Name  string
	Value *v1.Approval
}

// World is what one reconcile knows of an intent: the intent itself, with the status
// this reconcile has recorded so far, the facts read around it, and what this
// reconcile already did. Next reads it and changes nothing in it but the memo of
// the normalized input (Input).
type World struct {
	// Intent is the intent with the status as this reconcile will write it.
	Intent *v1.ToolIntent
	// Now is the reconcile's clock (an injected one in tests).
	Now time.Time
	// ControllerIdentity is the user the controller creates a model task's intents
	// as (validation).
	ControllerIdentity string

	// Task is the intent's AgentTask, read fresh; nil when it does not exist.
	Task Fact[*v1.AgentTask]
	// TaskIntents are all intents of the task (validation: the earlier calls and
	// the files they read).
	TaskIntents Fact[[]v1.ToolIntent]
	// TaskHistory is the task's status.history (its retired calls), read after
	// TaskIntents with them: a call retired between the two reads is counted in one
	// or the other, never in neither. Unknown, the Task's is used.
	TaskHistory Fact[*v1.CallHistory]
	// Stops are the task's intents decided Stop.
	Stops Fact[[]v1.ToolIntent]
	// Decided is the decision the policies in force give the call now, with the
	// judge asked (the first decision), before the task's ask limits.
	Decided Fact[*v1.Decision]
	// OtherApprovals are the task's Approvals of other intents (ask limits).
	OtherApprovals Fact[[]v1.Approval]
	// Turn is the call's batch (pipeline.TurnSiblings), itself included.
	Turn Fact[[]v1.ToolIntent]
	// Grants are the ApprovalGrants that name the intent's task.
	Grants Fact[[]v1.ApprovalGrant]
	// Approval is the Approval read by the name a Need gave.
	Approval Fact[NamedApproval]
	// Fingerprint is the decision's fingerprint with the deciding policy's current
	// generation ("" when the policy is gone: no approval matches).
	Fingerprint Fact[string]
	// Rechecked is the decision the policies in force give the call just before it
	// runs, not judged, at the time it was first decided.
	Rechecked Fact[*v1.Decision]
	// Execution is the Execution the intent names; nil when it does not exist.
	Execution Fact[*v1.Execution]
	// Stale is whether the API server holds a newer intent than Intent.
	Stale Fact[bool]
	// FinishedExecution is the API server's copy of a finished Execution; nil when
	// it is gone, was replaced, or is not finished there yet.
	FinishedExecution Fact[*v1.Execution]
	// ExistingExecution is the Execution of the wanted name found when creating it
	// was AlreadyExists.
	ExistingExecution Fact[*v1.Execution]
	// ResultPolicies are the policies in force when a finished call is observed,
	// for its result rules.
	ResultPolicies Fact[*ResultPolicies]
	// ResultApproval is the Approval that releases the intent's held output
	// (pipeline.ResultApprovalName), read from the API server; nil when none exists.
	ResultApproval Fact[*v1.Approval]

	// ApprovalUsed: this reconcile recorded the Approval consumed by the Execution.
	ApprovalUsed bool
	// ExecutionNamed: this reconcile's status write named the Execution.
	ExecutionNamed bool
	// ExecutionCreated: this reconcile created the Execution.
	ExecutionCreated bool

	input json.RawMessage
}

// ResultPolicies are the policies in scope of the intent's namespace, as the result
// rules read them (policy.CheckResult), and the task's recorded fires.
type ResultPolicies struct {
	Cluster, Namespaced []*policy.CompiledPolicy
	// Broken names the policies in scope with result rules that do not compile.
	Broken []string
	Fires  policy.FireCounts
}

// Input is the intent's normalized input (pipeline.NormalizedInput), computed once
// per World: deciding, asking and fingerprinting all read it, after validation.
func (w *World) Input() json.RawMessage {
	if w.input == nil {
		w.input, _ = pipeline.NormalizedInput(w.Intent)
	}
	return w.input
}

// History is the task's history of retired calls: TaskHistory when it was read,
// else the one of the Task read.
func (w *World) History() *v1.CallHistory {
	if w.TaskHistory.Known {
		return w.TaskHistory.Value
	}
	if w.Task.Value != nil {
		return w.Task.Value.Status.History
	}
	return nil
}
