package archive

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/archive/body"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Task is the body of a task's record (package body).
type Task = body.Task

// TaskRecord is the record of a task that ended (succeeded, failed or was
// cancelled), recorded when its end was: its chain is its own UID's.
func TaskRecord(task *v1.AgentTask, turns []agent.TurnRecord, checks map[int32]v1.CompletionCheck, push *gitws.Record) (Record, error) {
	if pipeline.EndedBy(task.Status.Conditions) == "" {
		return Record{}, fmt.Errorf("AgentTask %s/%s has not ended: only a finished task is archived", task.Namespace, task.Name)
	}
	// It ended when the condition that says so became true.
	ended := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionSucceeded)
	if !meta.IsStatusConditionTrue(task.Status.Conditions, v1.ConditionSucceeded) {
		ended = meta.FindStatusCondition(task.Status.Conditions, v1.ConditionFailed)
	}
	rec := Task{Task: object(task.ObjectMeta, task.Spec, task.Status), Turns: turns, Push: push}
	for turn := int32(0); turn < int32(len(turns)); turn++ {
		if c, ok := checks[turn]; ok {
			rec.CompletionChecks = append(rec.CompletionChecks, c)
		}
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return Record{}, err
	}
	return Record{
		UID: string(task.UID), Kind: KindTask, Namespace: task.Namespace, Task: task.Name, TaskUID: string(task.UID),
		Name: task.Name, RecordedAt: ended.LastTransitionTime.Time, Body: raw,
	}, nil
}
