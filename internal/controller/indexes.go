package controller

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Field indexes the reconcilers list by.
const (
	// IndexIntentTask indexes ToolIntents by spec.taskRef.name.
	IndexIntentTask = "spec.taskRef.name"
	// IndexIntentTurn indexes ToolIntents by task and turn (IntentTurnKey): the
	// batch of one turn is found without reading the task's whole history, so a
	// task's thousandth call costs what its first did.
	IndexIntentTurn = "toolgate.dev/task-turn"
	// IndexIntentStop indexes the ToolIntents decided Stop, or whose result a result
	// rule stopped, by their task's name: a
	// task with one takes no more calls, from the moment the Stop is recorded, not
	// only once the task's status says Failed.
	IndexIntentStop = "toolgate.dev/stopped-task"
	// IndexApprovalTask indexes Approvals by spec.taskRef.name.
	IndexApprovalTask = "spec.taskRef.name"
	// IndexGrantTask indexes ApprovalGrants by spec.taskRef.name, so that an asked
	// call finds its task's grants.
	IndexGrantTask = "spec.taskRef.name"
	// IndexExecutionTask indexes Executions by spec.taskRef.name, so that a task
	// that ends finds the calls it still runs.
	IndexExecutionTask = "spec.taskRef.name"
	// IndexTaskCopyOf indexes AgentTasks by spec.workspace.copyOf.taskRef.name, so
	// that a task appearing, or seeding its workspace, wakes the tasks waiting to
	// copy it.
	IndexTaskCopyOf = "spec.workspace.copyOf.taskRef.name"
	// IndexTaskExistingClaim indexes AgentTasks by spec.workspace.existingClaim, so
	// that a claim created after its task wakes it.
	IndexTaskExistingClaim = "spec.workspace.existingClaim"
)

// IntentTurnKey is the IndexIntentTurn value of a task's turn.
func IntentTurnKey(task string, turn int32) string {
	return fmt.Sprintf("%s/%d", task, turn)
}

// setupIndexes registers the field indexes; it runs before the reconcilers.
func setupIndexes(mgr ctrl.Manager, _ Options) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.ToolIntent{}, IndexIntentTask, func(o client.Object) []string {
		return []string{o.(*v1.ToolIntent).Spec.TaskRef.Name}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.ToolIntent{}, IndexIntentTurn, func(o client.Object) []string {
		in := o.(*v1.ToolIntent)
		return []string{IntentTurnKey(in.Spec.TaskRef.Name, in.Spec.Turn)}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.ToolIntent{}, IndexIntentStop, func(o client.Object) []string {
		in := o.(*v1.ToolIntent)
		if d := in.Status.Decision; d != nil && (d.Action == v1.DecisionStop || pipeline.ResultStopped(in.Status.Observation)) {
			return []string{in.Spec.TaskRef.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.AgentTask{}, IndexTaskCopyOf, func(o client.Object) []string {
		if c := o.(*v1.AgentTask).Spec.Workspace.CopyOf; c != nil {
			return []string{c.TaskRef.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.AgentTask{}, IndexTaskExistingClaim, func(o client.Object) []string {
		if c := o.(*v1.AgentTask).Spec.Workspace.ExistingClaim; c != "" {
			return []string{c}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.Approval{}, IndexApprovalTask, func(o client.Object) []string {
		return []string{o.(*v1.Approval).Spec.TaskRef.Name}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.ApprovalGrant{}, IndexGrantTask, func(o client.Object) []string {
		return []string{o.(*v1.ApprovalGrant).Spec.TaskRef.Name}
	}); err != nil {
		return err
	}
	return mgr.GetFieldIndexer().IndexField(ctx, &v1.Execution{}, IndexExecutionTask, func(o client.Object) []string {
		return []string{o.(*v1.Execution).Spec.TaskRef.Name}
	})
}
