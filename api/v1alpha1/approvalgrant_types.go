package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GrantScope is how much an approver's decision covers.
// +kubebuilder:validation:Enum=Once;Task;CommandPrefix
type GrantScope string

const (
	// GrantScopeOnce: the approved call only (an Approval without a grant).
	GrantScopeOnce GrantScope = "Once"
	// GrantScopeTask: later calls of the same task whose approval fingerprint (tool,
	// input, rule at its generation, walls and sandbox) equals the approved call's.
	GrantScopeTask GrantScope = "Task"
	// GrantScopeCommandPrefix: later bash calls of the same task every part of which
	// starts with the approved argv prefix, behind walls no wider than the approved
	// call's.
	GrantScopeCommandPrefix GrantScope = "CommandPrefix"
)

// Bounds of a grant, when the deciding rule sets none, and their ceilings.
const (
	DefaultGrantMaxUses            = 10
	MaxGrantUses                   = 1000
	DefaultGrantMaxDurationSeconds = 3600
	MaxGrantDurationSeconds        = 7 * 24 * 3600
)

// RuleGrants says how far an approver may extend an Approval the rule asks for.
type RuleGrants struct {
	// allowedScopes an approver may grant: Once (default, the approved call only),
	// Task (the same call again in the same task) and CommandPrefix (bash calls
	// whose every part starts with an approved argv prefix; only on rules that
	// match the bash tool alone).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:default={Once}
	AllowedScopes []GrantScope `json:"allowedScopes,omitempty"`
	// maxUses is the most calls one grant may allow (default 10, at most 1000).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxUses *int32 `json:"maxUses,omitempty"`
	// maxDurationSeconds is the longest a grant may live from its creation
	// (default 3600, at most 604800).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=604800
	MaxDurationSeconds *int32 `json:"maxDurationSeconds,omitempty"`
}

// Allows says whether the rule lets an approver grant scope.
func (g *RuleGrants) Allows(scope GrantScope) bool {
	if g == nil || len(g.AllowedScopes) == 0 {
		return scope == GrantScopeOnce
	}
	for _, s := range g.AllowedScopes {
		if s == scope {
			return true
		}
	}
	return false
}

// UsesBound is the most uses a grant under the rule may have.
func (g *RuleGrants) UsesBound() int32 {
	if g == nil || g.MaxUses == nil {
		return DefaultGrantMaxUses
	}
	return *g.MaxUses
}

// DurationBoundSeconds is the longest a grant under the rule may live.
func (g *RuleGrants) DurationBoundSeconds() int32 {
	if g == nil || g.MaxDurationSeconds == nil {
		return DefaultGrantMaxDurationSeconds
	}
	return *g.MaxDurationSeconds
}

// ApprovalGrantSpec is what an approver granted beyond one call. It is immutable:
// a grant is revoked by deleting it.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an ApprovalGrant's spec is immutable: delete it to revoke it, and create another"
// +kubebuilder:validation:XValidation:rule="self.scope != 'Once'",message="spec.scope Once needs no grant: the Approval itself covers its one call; a grant's scope is Task or CommandPrefix"
// +kubebuilder:validation:XValidation:rule="self.scope == 'CommandPrefix' ? has(self.commandPrefix) : !has(self.commandPrefix)",message="spec.commandPrefix is required for scope CommandPrefix and allowed only there: the argv words every part of a later call must start with, for example [npm, test]"
type ApprovalGrantSpec struct {
	// approvalRef names the Approved Approval the grant extends; its decider must
	// be grantedBy.
	// +required
	ApprovalRef LocalObjectReference `json:"approvalRef"`
	// taskRef names the AgentTask the grant is for: it never covers a call of
	// another task.
	// +required
	TaskRef LocalObjectReference `json:"taskRef"`
	// taskUID is the task's UID: a task deleted and created again under the same
	// name is another task. The grant must be owned by that task (an
	// ownerReference), so that it is deleted with it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	TaskUID string `json:"taskUID"`
	// scope is Task or CommandPrefix (Once needs no grant).
	// +required
	Scope GrantScope `json:"scope"`
	// commandPrefix is the argv words every part of a later bash call must start
	// with (scope CommandPrefix): [npm, test] covers `npm test -- --watch=false`,
	// never `npm test; rm -rf .`.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^\S+$`
	CommandPrefix []string `json:"commandPrefix,omitempty"`
	// maxUses is how many calls the grant may allow, within the deciding rule's
	// grants.maxUses.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxUses int32 `json:"maxUses"`
	// expiresAt is when the grant stops allowing calls, within the deciding rule's
	// grants.maxDurationSeconds of the grant's creation.
	// +required
	ExpiresAt metav1.Time `json:"expiresAt"`
	// grantedBy is the user name of the approver; it must be the caller's own and
	// the Approval's decider.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	GrantedBy string `json:"grantedBy"`
}

// GrantState is where a grant stands after its last use. It is written only when
// a use is taken (the compare-and-swap that counts it), so it has no state for an
// expired grant: spec.expiresAt says when a grant stops, and a call it no longer
// covers says why in its own decision.
// +kubebuilder:validation:Enum=Active;Exhausted
type GrantState string

const (
	// GrantStateActive: the grant has uses left.
	GrantStateActive GrantState = "Active"
	// GrantStateExhausted: every use was taken.
	GrantStateExhausted GrantState = "Exhausted"
)

// ApprovalGrantStatus is written by the controller when it uses the grant.
type ApprovalGrantStatus struct {
	// uses is how many calls the grant allowed. Each use is a compare-and-swap on
	// the grant, made before the call runs: two calls never take the same use.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Uses int32 `json:"uses,omitempty"`
	// lastUsedBy names the ToolIntent of the last use.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LastUsedBy string `json:"lastUsedBy,omitempty"`
	// state of the grant as of its last use.
	// +optional
	State GrantState `json:"state,omitempty"`
	// message explains the state.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// ApprovalGrant lets later calls of one task run on an approver's earlier
// decision, within the bounds the deciding rule allows (spec.grants of the rule).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=grant,categories=toolgate
// +kubebuilder:printcolumn:name="Task",type=string,JSONPath=`.spec.taskRef.name`
// +kubebuilder:printcolumn:name="Approval",type=string,JSONPath=`.spec.approvalRef.name`
// +kubebuilder:printcolumn:name="Scope",type=string,JSONPath=`.spec.scope`
// +kubebuilder:printcolumn:name="By",type=string,JSONPath=`.spec.grantedBy`
// +kubebuilder:printcolumn:name="Uses",type=integer,JSONPath=`.status.uses`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxUses`
// +kubebuilder:printcolumn:name="Expires",type=string,format=date-time,JSONPath=`.spec.expiresAt`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
type ApprovalGrant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what was granted, by whom; immutable.
	// +required
	Spec ApprovalGrantSpec `json:"spec"`
	// status is written by the controller.
	// +optional
	Status ApprovalGrantStatus `json:"status,omitempty"`
}

// ApprovalGrantList is a list of ApprovalGrants.
// +kubebuilder:object:root=true
type ApprovalGrantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApprovalGrant `json:"items"`
}

func init() {
	register(&ApprovalGrant{}, &ApprovalGrantList{})
}
