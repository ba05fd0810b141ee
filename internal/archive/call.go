package archive

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive/body"
)

// Call and Object are the records' bodies, in package body so that their
// readers need no database driver.
type (
	Call             = body.Call
	Object[S, T any] = body.Object[S, T]
)

func object[S, T any](m metav1.ObjectMeta, spec S, status T) Object[S, T] {
	return body.NewObject(m, spec, status)
}

// legacyArchivedLabel is the label earlier controllers set on an archived intent.
const legacyArchivedLabel = "toolgate.dev/archived"

// CallRecord is the record of a finished call: intent observed, with its Approval
// and Execution when it had them (nil otherwise). taskUID is the UID of the task the
// call was decided for.
func CallRecord(taskUID string, intent *v1.ToolIntent, approval *v1.Approval, exec *v1.Execution) (Record, error) {
	obs := intent.Status.Observation
	if obs == nil || obs.ObservedAt == nil {
		return Record{}, fmt.Errorf("ToolIntent %s/%s has no observation: only a finished call is archived", intent.Namespace, intent.Name)
	}
	// Controllers before the archive's versions (built_from) labelled an intent
	// archived once its record was stored: the label is no part of the call, and
	// a record built again from such an intent (to confirm it before retention
	// deletes the call) must be the one stored without it.
	meta := *intent.ObjectMeta.DeepCopy()
	delete(meta.Labels, legacyArchivedLabel)
	if len(meta.Labels) == 0 {
		meta.Labels = nil
	}
	c := Call{Intent: object(meta, intent.Spec, intent.Status)}
	from := Versions{Object: intent.ResourceVersion}
	if approval != nil {
		a := object(approval.ObjectMeta, approval.Spec, approval.Status)
		c.Approval, from.Approval = &a, approval.ResourceVersion
	}
	if exec != nil {
		e := object(exec.ObjectMeta, exec.Spec, exec.Status)
		c.Execution, from.Execution = &e, exec.ResourceVersion
	}
	body, err := json.Marshal(c)
	if err != nil {
		return Record{}, err
	}
	return Record{
		UID: string(intent.UID), Kind: KindCall, Namespace: intent.Namespace, Task: intent.Spec.TaskRef.Name, TaskUID: taskUID,
		Name: intent.Name, RecordedAt: obs.ObservedAt.Time, Body: body, BuiltFrom: from,
	}, nil
}
