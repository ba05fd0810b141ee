// Package approval is the one writer of an Approval's status. Two reconcilers act on
// an Approval: its own, which records the state by time and decision
// (pipeline.ApprovalStatusAt), and the ToolIntent's, which retires it at the moment
// the call runs (Consumed) or is decided again (Superseded). Each write is an update
// that carries the resourceVersion the writer read, a compare-and-swap: of two
// racing writers only one succeeds, so an approval is used at most once. The rules
// of what the state is are pure and live in internal/pipeline; the writes are here.
package approval

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Record writes the status the Approval's reconciler computed for it.
func Record(ctx context.Context, c client.Client, a *v1.Approval, next v1.ApprovalStatus) error {
	a.Status = next
	a.Status.ObservedGeneration = a.Generation
	return c.Status().Update(ctx, a)
}

// Retire records the Approval's end: Consumed by the Execution consumedBy, Superseded
// by a decision made again, or kept Approved with the reason the controller refused
// to use it. A write that would change nothing is not made.
func Retire(ctx context.Context, c client.Client, a *v1.Approval, state v1.ApprovalState, consumedBy, msg string) error {
	if a.Status.State == state && a.Status.Message == msg {
		return nil
	}
	a.Status.State = state
	a.Status.ConsumedByExecutionName = consumedBy
	a.Status.Message = msg
	a.Status.ObservedGeneration = a.Generation
	return c.Status().Update(ctx, a)
}
