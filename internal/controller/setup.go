// Package controller holds toolgate's reconcilers. Each reconciler reads the world,
// calls pure decision functions (internal/policy, internal/pipeline, internal/executor)
// and writes status once.
package controller

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
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
