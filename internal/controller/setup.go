// Package controller holds toolgate's reconcilers. Each reconciler reads the world,
// calls pure decision functions (internal/policy, internal/pipeline, internal/executor)
// and writes status once.
package controller

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/executor"
)

// Options configure the reconcilers.
type Options struct {
	// RunnerImage holds the runner binary; an init container copies it into each
	// Execution's pod.
	RunnerImage string
	// DefaultSandboxImage is used when a task names no sandbox image.
	DefaultSandboxImage string
	// ControllerIdentity is the Kubernetes user the controller runs as. The agent loop
	// names it in spec.requestedBy of the ToolIntents it creates for a model, because
	// the admission policy (config/admission) requires requestedBy to be the creator.
	// Empty means DefaultControllerIdentity.
	ControllerIdentity string
	// ModelEndpoints are the model endpoints a task's spec.agent.model.baseURL may
	// name: the controller sends a task's API key only there. The zero value means
	// agent.DefaultEndpoints.
	ModelEndpoints agent.Endpoints
	// Now is the clock of the intent and task reconcilers; nil means time.Now. Tests
	// move it to expire approvals without waiting.
	Now func() time.Time
}

// DefaultControllerIdentity is the service account config/default deploys the
// controller as, and the one the admission policies of config/admission exempt.
const DefaultControllerIdentity = "system:serviceaccount:toolgate-system:toolgate-controller-manager"

func (o Options) identity() string {
	if o.ControllerIdentity != "" {
		return o.ControllerIdentity
	}
	return DefaultControllerIdentity
}

func (o Options) modelEndpoints() agent.Endpoints {
	if !o.ModelEndpoints.IsZero() {
		return o.ModelEndpoints
	}
	return agent.MustParseEndpoints(agent.DefaultEndpoints)
}

func (o Options) clock() func() time.Time {
	if o.Now != nil {
		return o.Now
	}
	return time.Now
}

// SetupWithManager registers every toolgate reconciler with the manager.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	setups := []func(ctrl.Manager, Options) error{
		setupIndexes,
		setupAgentTask,
		setupToolIntent,
		setupApproval,
		setupExecution,
		setupPolicies,
	}
	for _, setup := range setups {
		if err := setup(mgr, opts); err != nil {
			return err
		}
	}
	return nil
}

// CacheOptions limit what the manager's cache watches and holds. Only the Jobs, Pods
// and NetworkPolicies toolgate created are cached: caching every pod of a large
// cluster would cost memory for nothing. Only the Secrets labelled
// LabelModelCredentials=true are cached, and the agent loop reads API keys through
// the cache: any other Secret is invisible to the controller's reads, whatever its
// RBAC (which cannot select by label) allows.
func CacheOptions() cache.Options {
	ours, err := labels.NewRequirement(executor.LabelExecution, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	credentials, err := labels.NewRequirement(LabelModelCredentials, selection.Equals, []string{ModelCredentialsValue})
	if err != nil {
		panic(err)
	}
	byLabel := cache.ByObject{Label: labels.NewSelector().Add(*ours)}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:                 byLabel,
		&batchv1.Job{}:                byLabel,
		&networkingv1.NetworkPolicy{}: byLabel,
		&corev1.Secret{}:              {Label: labels.NewSelector().Add(*credentials)},
	}}
}
