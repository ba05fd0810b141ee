// Package v1alpha1 contains the toolgate.dev/v1alpha1 API: AgentTask, ToolIntent,
// Approval, Execution, ToolPolicy and ClusterToolPolicy.
//
// +kubebuilder:object:generate=true
// +groupName=toolgate.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every toolgate resource.
	GroupVersion = schema.GroupVersion{Group: "toolgate.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the toolgate types into a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the toolgate types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// knownTypes are the types of this group, registered by each type's file.
	knownTypes []runtime.Object
)

// register adds types to the group; each type's file calls it from init.
func register(objects ...runtime.Object) { knownTypes = append(knownTypes, objects...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
