package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// ToolIntentReconciler reconciles ToolIntent objects.
type ToolIntentReconciler struct {
	client.Client
	Scheme  *runtime.Scheme
	Options Options
}

func setupToolIntent(mgr ctrl.Manager, opts Options) error {
	r := &ToolIntentReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Options: opts}
	return ctrl.NewControllerManagedBy(mgr).
		For(&toolgatev1alpha1.ToolIntent{}).
		Named("toolintent").
		Complete(r)
}

// Reconcile moves one ToolIntent forward.
func (r *ToolIntentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, nil
}
