package controller

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/gitws"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/transcript"
)

// taskRecord builds an ended task's record: its goal, mode and final status, its
// turn records, completion checks and push, read from the API server (the cache
// holds no ConfigMap of a task's record). It is stored when the task leaves the
// cluster (expire), after the records of all its calls, so the record holds the
// status as it finally was.
func taskRecord(ctx context.Context, api client.Reader, task *v1.AgentTask) (archive.Record, error) {
	turns, checks, _, err := transcript.Read(ctx, api, task)
	if err != nil {
		return archive.Record{}, err
	}
	push, err := pushRecord(ctx, api, task)
	if err != nil {
		return archive.Record{}, err
	}
	return archive.TaskRecord(task, turns, checks, push)
}

// pushRecord is the change the task recorded for its push, nil when it recorded
// none (or the record is not the task's).
func pushRecord(ctx context.Context, api client.Reader, task *v1.AgentTask) (*gitws.Record, error) {
	cm := &corev1.ConfigMap{}
	err := api.Get(ctx, client.ObjectKey{Namespace: task.Namespace, Name: pipeline.PushRecordName(task.Name)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec gitws.Record
	if !transcript.ControlledByTask(cm, task) || json.Unmarshal([]byte(cm.Data[gitws.RecordKey]), &rec) != nil {
		return nil, nil
	}
	return &rec, nil
}
