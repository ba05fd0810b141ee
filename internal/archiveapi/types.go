// Package archiveapi is the wire form of archive.toolgate.dev/v1alpha1, the
// read-only aggregated API that serves the archive (internal/archive) to kubectl
// with the reader's own RBAC: the objects it returns, its paths and its discovery.
// The server is archiveapi/server; the kubectl plugin reads through these types
// with the user's kubeconfig, never with a database password.
//
// Its objects are not custom resources; the marker below keeps controller-gen
// from taking them for some.
//
// +kubebuilder:skip
package archiveapi

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The group, its version and resources.
const (
	Group   = "archive.toolgate.dev"
	Version = "v1alpha1"
	// Calls are finished calls, read by name or listed by task (taskUID=).
	Calls = "calls"
	// Tasks are finished tasks, read by name: the newest record of the name.
	Tasks = "tasks"
	// Verify is the subresource of a task that walks its hash chain.
	Verify = "verify"
)

// GroupVersion is archive.toolgate.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Paging bounds of a list of calls.
const (
	DefaultLimit = 500
	MaxLimit     = 1000
)

// RecordInfo is what the archive adds to a recorded object: its place in its
// task's chain.
type RecordInfo struct {
	// Seq is the order the record was stored in.
	Seq        int64       `json:"seq"`
	Task       string      `json:"task"`
	TaskUID    string      `json:"taskUID"`
	RecordedAt metav1.Time `json:"recordedAt"`
	SHA256     string      `json:"sha256"`
	PrevSHA256 string      `json:"prevSHA256"`
}

// Record is a Call or a Task: metadata names the recorded object (its name, its
// namespace, its UID), record is its place in the chain, and body is the record as
// stored (body.Call or body.Task of package archive/body, JSON).
type Record struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Record            RecordInfo      `json:"record"`
	Body              json.RawMessage `json:"body"`
}

// CallList is a page of a task's calls; metadata.continue reads the next.
type CallList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []Record `json:"items"`
}

// TaskVerification is what the verify subresource found walking a task's chain.
type TaskVerification struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	TaskUID           string `json:"taskUID"`
	// Records is how many records were checked.
	Records int `json:"records"`
	// LastSHA256 is the hash of the last record checked.
	LastSHA256 string `json:"lastSHA256,omitempty"`
	// Intact says the whole chain holds; otherwise Break says where it does not.
	Intact bool        `json:"intact"`
	Break  *ChainBreak `json:"break,omitempty"`
}

// ChainBreak is where a chain breaks: the record and what does not hold.
type ChainBreak struct {
	Seq     int64  `json:"seq"`
	Name    string `json:"name"`
	Problem string `json:"problem"`
}

// Discovery: what the API serves, in the documents kubectl and the aggregator read.
func Discovery() (metav1.APIGroupList, metav1.APIGroup, metav1.APIResourceList) {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: GroupVersion.String(), Version: Version}
	group := metav1.APIGroup{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:     Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv,
	}
	resources := metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: GroupVersion.String(),
		APIResources: []metav1.APIResource{
			{Name: Calls, SingularName: "call", Namespaced: true, Kind: "Call", Verbs: metav1.Verbs{"get", "list"}},
			{Name: Tasks, SingularName: "task", Namespaced: true, Kind: "Task", Verbs: metav1.Verbs{"get"}},
			{Name: Tasks + "/" + Verify, Namespaced: true, Kind: "TaskVerification", Verbs: metav1.Verbs{"get"}},
		},
	}
	groups := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{group}}
	return groups, group, resources
}
