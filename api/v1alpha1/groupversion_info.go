// Package v1alpha1 contains the toolgate.dev/v1alpha1 API: AgentTask, ToolIntent,
// Approval, Execution, ToolPolicy and ClusterToolPolicy.
//
// +kubebuilder:object:generate=true
// +groupName=toolgate.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every toolgate resource.
	GroupVersion = schema.GroupVersion{Group: "toolgate.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the toolgate types into a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the toolgate types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
