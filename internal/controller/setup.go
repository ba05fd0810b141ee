// Package controller holds toolgate's reconcilers. Each reconciler reads the world,
// calls pure decision functions (internal/policy, internal/pipeline, internal/executor)
// and writes status once.
package controller

import (
	ctrl "sigs.k8s.io/controller-runtime"
)

// Options configure the reconcilers.
type Options struct {
	// RunnerImage holds the runner binary; an init container copies it into each
	// Execution's pod.
	RunnerImage string
	// DefaultSandboxImage is used when a task names no sandbox image.
	DefaultSandboxImage string
}

// SetupWithManager registers every toolgate reconciler with the manager.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	setups := []func(ctrl.Manager, Options) error{
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
