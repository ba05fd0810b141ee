package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// ExecutionReconciler reconciles Execution objects.
type ExecutionReconciler struct {
	client.Client
	Scheme  *runtime.Scheme
	Options Options
}

func setupExecution(mgr ctrl.Manager, opts Options) error {
	r := &ExecutionReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Options: opts}
	return ctrl.NewControllerManagedBy(mgr).
		For(&toolgatev1alpha1.Execution{}).
		Named("execution").
		Complete(r)
}

// Reconcile moves one Execution forward.
func (r *ExecutionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, nil
}
