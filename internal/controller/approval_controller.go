package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/approval"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// +kubebuilder:rbac:groups=toolgate.dev,resources=approvals,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=approvals/status,verbs=get;update;patch

// ApprovalReconciler keeps an Approval's state: Pending until a person decides, then
// Approved or Denied when the controller saw the decision before expiresAt, else
// Expired (pipeline.ApprovalStatusAt holds the rules). It writes through
// internal/approval, the one writer of an Approval's status, which the ToolIntent
// reconciler also uses to retire an Approval when the call runs or is decided again.
type ApprovalReconciler struct {
	client.Client
	// Now is the clock; tests may replace it.
	Now func() time.Time
}

func setupApproval(mgr ctrl.Manager, opts Options) error {
	r := &ApprovalReconciler{Client: mgr.GetClient(), Now: opts.clock()}
	return ctrl.NewControllerManagedBy(mgr).
		// A decision (spec) or a nudge (an annotation) is what it acts on; status
		// writes, its own and the retirements by the other reconcilers, are not, and
		// expiry comes from RequeueAfter. (Its own Pending write would otherwise wake
		// it again for nothing.)
		For(&v1.Approval{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: opts.Workers.orDefault().Approval}).
		Named("approval").
		Complete(r)
}

// Reconcile records the Approval's state as of now.
func (r *ApprovalReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := &v1.Approval{}
	if err := r.Get(ctx, req.NamespacedName, a); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !a.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	now := r.Now()
	next, lookAgain := pipeline.ApprovalStatusAt(a, now)
	next.ObservedGeneration = a.Generation
	if equality.Semantic.DeepEqual(a.Status, next) {
		return ctrl.Result{RequeueAfter: lookAgain}, nil
	}
	before := a.Status.State
	if err := approval.Record(ctx, r.Client, a, next); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	if before != next.State && next.State != v1.ApprovalStatePending {
		metrics.ApprovalWait.WithLabelValues(string(next.State)).Observe(now.Sub(a.CreationTimestamp.Time).Seconds())
		ctrl.LoggerFrom(ctx).V(1).Info("approval settled", "approval", klog.KObj(a), "state", next.State, "tally", next.Tally, "approvedBy", next.ApprovedBy, "deniedBy", next.DeniedBy)
	}
	return ctrl.Result{RequeueAfter: lookAgain}, nil
}
