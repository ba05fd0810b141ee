package controller

import (
	"time"

	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

// PolicyReconciler compiles ToolPolicies and ClusterToolPolicies and sets Ready, so
// that people see at once whether a policy is used and, if not, which rule is wrong.
// One reconciler serves both kinds: a request without a namespace is a
// ClusterToolPolicy (ToolPolicies are always namespaced).
type PolicyReconciler struct {
	client.Client
	Scheme *runtime.Scheme
}

// +kubebuilder:rbac:groups=toolgate.dev,resources=toolpolicies;clustertoolpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolpolicies/status;clustertoolpolicies/status,verbs=get;update;patch

func setupPolicies(mgr ctrl.Manager, _ Options) error {
	r := &PolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}
	// Only spec changes need a compile; the status writes of this reconciler would
	// otherwise trigger it again.
	onSpec := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	if err := ctrl.NewControllerManagedBy(mgr).For(&toolgatev1alpha1.ToolPolicy{}, onSpec).Named("toolpolicy").Complete(r); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).For(&toolgatev1alpha1.ClusterToolPolicy{}, onSpec).Named("clustertoolpolicy").Complete(r)
}

// Reconcile compiles one policy and records the result in its status.
func (r *PolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Namespace == "" {
		p := &toolgatev1alpha1.ClusterToolPolicy{}
		return r.reconcile(ctx, req, policy.KindClusterToolPolicy, p, &p.Spec, &p.Status)
	}
	p := &toolgatev1alpha1.ToolPolicy{}
	return r.reconcile(ctx, req, policy.KindToolPolicy, p, &p.Spec, &p.Status)
}

// reconcile serves both kinds: spec and status point into obj, so they hold the
// object's values once it is read.
func (r *PolicyReconciler) reconcile(ctx context.Context, req ctrl.Request, kind string, obj client.Object,
	spec *toolgatev1alpha1.ToolPolicySpec, status *toolgatev1alpha1.ToolPolicyStatus) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues(kind, klog.KRef(req.Namespace, req.Name))
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil
	}

	desired := policyStatus(kind, obj.GetName(), obj.GetGeneration(), *spec, *status)
	if equality.Semantic.DeepEqual(desired, *status) {
		return ctrl.Result{}, nil
	}
	*status = desired
	if err := r.Status().Update(ctx, obj); err != nil {
		if apierrors.IsConflict(err) {
			// Someone else wrote the policy; the next event brings the new version.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	ready := meta.FindStatusCondition(desired.Conditions, toolgatev1alpha1.ConditionReady)
	log.V(2).Info("policy compiled", "ready", ready.Status, "reason", ready.Reason, "rules", desired.Rules)
	return ctrl.Result{}, nil
}

// policyStatus computes a policy's status from its spec. The old status only
// supplies the conditions' transition times, which move only on a real flip.
func policyStatus(kind, name string, generation int64, spec toolgatev1alpha1.ToolPolicySpec, old toolgatev1alpha1.ToolPolicyStatus) toolgatev1alpha1.ToolPolicyStatus {
	out := toolgatev1alpha1.ToolPolicyStatus{
		ObservedGeneration: generation,
		Conditions:         append([]metav1.Condition(nil), old.Conditions...),
	}
	ready := metav1.Condition{
		Type:               toolgatev1alpha1.ConditionReady,
		ObservedGeneration: generation,
	}
	compiled, err := policy.Compile(kind, name, generation, spec)
	if err != nil {
		ready.Status = metav1.ConditionFalse
		ready.Reason = toolgatev1alpha1.ReasonPolicyInvalid
		ready.Message = fmt.Sprintf("%v; the policy is not used, and while it is in scope nothing is allowed without a human", err)
	} else {
		out.Rules = int32(compiled.Rules())
		ready.Status = metav1.ConditionTrue
		ready.Reason = toolgatev1alpha1.ReasonPolicyCompiled
		ready.Message = fmt.Sprintf("%d rules compiled and every example passed", compiled.Rules())
	}
	meta.SetStatusCondition(&out.Conditions, ready)
	return out
}
