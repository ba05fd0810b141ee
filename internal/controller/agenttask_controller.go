package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// AgentTaskReconciler reconciles AgentTask objects.
type AgentTaskReconciler struct {
	client.Client
	Scheme  *runtime.Scheme
	Options Options
}

func setupAgentTask(mgr ctrl.Manager, opts Options) error {
	r := &AgentTaskReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Options: opts}
	return ctrl.NewControllerManagedBy(mgr).
		For(&toolgatev1alpha1.AgentTask{}).
		Named("agenttask").
		Complete(r)
}

// Reconcile moves one AgentTask forward.
func (r *AgentTaskReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, nil
}
