// Package approval is the one writer of an Approval's status. Three reconcilers act on
// an Approval: its own, which records the state by time and decision
// (pipeline.ApprovalStatusAt), the ToolIntent's, which retires it at the moment
// the call runs (Consumed) or is decided again (Superseded), and the notifier's,
// which records what it delivered (RecordNotifications). Each write is an update
// that carries the resourceVersion the writer read, a compare-and-swap: of two
// racing writers only one succeeds, so an approval is used at most once. The rules
// of what the state is are pure and live in internal/pipeline; the writes are here.
package approval

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
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

// RecordNotifications writes the delivery records of the Approval's notifications,
// replacing those of the same channel and event. A delivery has happened by now,
// so a conflict is not given up on: the Approval is read again and the records put
// on what it holds, or the message would be sent again.
func RecordNotifications(ctx context.Context, c client.Client, a *v1.Approval, recs []v1.NotificationRecord) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		for _, rec := range recs {
			a.Status.Notifications = putRecord(a.Status.Notifications, rec)
		}
		err := c.Status().Update(ctx, a)
		if apierrors.IsConflict(err) {
			if getErr := c.Get(ctx, client.ObjectKeyFromObject(a), a); getErr != nil {
				return getErr
			}
		}
		return err
	})
}

// putRecord replaces the record of rec's channel and event, or adds it.
func putRecord(recs []v1.NotificationRecord, rec v1.NotificationRecord) []v1.NotificationRecord {
	for i := range recs {
		if recs[i].Channel == rec.Channel && recs[i].Event == rec.Event {
			recs[i] = rec
			return recs
		}
	}
	return append(recs, rec)
}
