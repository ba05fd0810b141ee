// Package body is the content of the archive's records (package archive): a
// call's and a task's, as JSON. It has no database in it, so that a reader of the
// records (the kubectl plugin, through the archive's API) takes the same types as
// the writer without taking a PostgreSQL driver with them.
package body

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/gitws"
)

// Call is the body of a call's record: the intent (its spec, validation, decision
// and observation), the Approval it was asked by with who decided and when, and the
// Execution with its result, hashes and output, each as the cluster held it (masked
// as the cluster copy is) without the fields only the API server uses.
type Call struct {
	Intent    Object[v1.ToolIntentSpec, v1.ToolIntentStatus] `json:"intent"`
	Approval  *Object[v1.ApprovalSpec, v1.ApprovalStatus]    `json:"approval,omitempty"`
	Execution *Object[v1.ExecutionSpec, v1.ExecutionStatus]  `json:"execution,omitempty"`
}

// Task is the body of a task's record: the task (goal, mode, budgets, its final
// status), what its model said turn by turn and how its final answers were checked,
// and the change it pushed, when it pushed one.
type Task struct {
	Task             Object[v1.AgentTaskSpec, v1.AgentTaskStatus] `json:"task"`
	Turns            []agent.TurnRecord                           `json:"turns,omitempty"`
	CompletionChecks []v1.CompletionCheck                         `json:"completionChecks,omitempty"`
	Push             *gitws.Record                                `json:"push,omitempty"`
}

// Object is a recorded object: what identifies it, and its spec and status.
type Object[S, T any] struct {
	Name   string            `json:"name"`
	UID    string            `json:"uid"`
	Labels map[string]string `json:"labels,omitempty"`
	// OwnerReferences say who controlled the object: an intent controlled by its
	// task was proposed by toolgate's agent loop, not by a user, which a replay of
	// the record must tell apart as a replay of the cluster's objects does.
	OwnerReferences   []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	CreationTimestamp metav1.Time             `json:"creationTimestamp"`
	Spec              S                       `json:"spec"`
	Status            T                       `json:"status"`
}

// NewObject is the record of an object of metadata m.
func NewObject[S, T any](m metav1.ObjectMeta, spec S, status T) Object[S, T] {
	return Object[S, T]{Name: m.Name, UID: string(m.UID), Labels: m.Labels, OwnerReferences: m.OwnerReferences,
		CreationTimestamp: m.CreationTimestamp, Spec: spec, Status: status}
}
