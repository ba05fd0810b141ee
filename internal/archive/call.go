package archive

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
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

func object[S, T any](m metav1.ObjectMeta, spec S, status T) Object[S, T] {
	return Object[S, T]{Name: m.Name, UID: string(m.UID), Labels: m.Labels, OwnerReferences: m.OwnerReferences,
		CreationTimestamp: m.CreationTimestamp, Spec: spec, Status: status}
}

// CallRecord is the record of a finished call: intent observed, with its Approval
// and Execution when it had them (nil otherwise). taskUID is the UID of the task the
// call was decided for.
func CallRecord(taskUID string, intent *v1.ToolIntent, approval *v1.Approval, exec *v1.Execution) (Record, error) {
	obs := intent.Status.Observation
	if obs == nil || obs.ObservedAt == nil {
		return Record{}, fmt.Errorf("ToolIntent %s/%s has no observation: only a finished call is archived", intent.Namespace, intent.Name)
	}
	c := Call{Intent: object(intent.ObjectMeta, intent.Spec, intent.Status)}
	if approval != nil {
		a := object(approval.ObjectMeta, approval.Spec, approval.Status)
		c.Approval = &a
	}
	if exec != nil {
		e := object(exec.ObjectMeta, exec.Spec, exec.Status)
		c.Execution = &e
	}
	body, err := json.Marshal(c)
	if err != nil {
		return Record{}, err
	}
	return Record{
		UID: string(intent.UID), Kind: KindCall, Namespace: intent.Namespace, Task: intent.Spec.TaskRef.Name, TaskUID: taskUID,
		Name: intent.Name, RecordedAt: obs.ObservedAt.Time, Body: body,
	}, nil
}
