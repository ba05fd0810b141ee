package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ApprovalDecision is one person's vote on an Approval.
// +kubebuilder:validation:Enum=Approved;Denied
type ApprovalDecision string

const (
	// DecisionApproved: the voter allows the call.
	DecisionApproved ApprovalDecision = "Approved"
	// DecisionDenied: the voter refuses the call; one counted Deny denies it.
	DecisionDenied ApprovalDecision = "Denied"
)

// ApprovalVote is one person's vote, written by that person: the admission policy
// requires user to be the caller's own name, lets each person vote once, and keeps
// every vote as it was cast.
type ApprovalVote struct {
	// user is the voter's Kubernetes user name (request.userInfo.username).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	User string `json:"user"`
	// decision is Approved or Denied.
	// +required
	Decision ApprovalDecision `json:"decision"`
	// comment from the voter; a denial's comment is fed back to the model.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Comment string `json:"comment,omitempty"`
}

// ApprovalState is where an Approval is in its life.
// +kubebuilder:validation:Enum=Pending;Approved;Denied;Expired;Consumed;Superseded
type ApprovalState string

const (
	ApprovalStatePending  ApprovalState = "Pending"
	ApprovalStateApproved ApprovalState = "Approved"
	ApprovalStateDenied   ApprovalState = "Denied"
	ApprovalStateExpired  ApprovalState = "Expired"
	// ApprovalStateConsumed: the approval was used by exactly one Execution.
	ApprovalStateConsumed ApprovalState = "Consumed"
	// ApprovalStateSuperseded: the call was decided again before it ran and the
	// policies in force asked again (another rule, other approvers); this approval
	// is never used, a new one asks. Its message names it.
	ApprovalStateSuperseded ApprovalState = "Superseded"
)

// ApprovalRequest is what the approver is asked, with secrets masked.
type ApprovalRequest struct {
	// tool to be called.
	// +required
	Tool ToolName `json:"tool"`
	// input is a summary of the tool's input with secrets masked.
	// +required
	// +kubebuilder:validation:MaxLength=8192
	Input string `json:"input"`
	// risk of the call.
	// +optional
	Risk Risk `json:"risk,omitempty"`
	// category is the strictest category of the call.
	// +optional
	Category CommandCategory `json:"category,omitempty"`
	// policyRuleRef names what asked: a policy's rule at the policy's generation,
	// or the task's mode (kind ModeDefault).
	// +required
	PolicyRuleRef PolicyRuleReference `json:"policyRuleRef"`
	// reason the rule gives.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Reason string `json:"reason,omitempty"`
	// walls are the restrictions the call runs under if approved (read-only
	// workspace, no network); absent when it runs in the task's own sandbox.
	// +optional
	Walls *SandboxWalls `json:"walls,omitempty"`
	// sandbox is where the call runs if approved, fixed when it was decided:
	// image, runtimeClass, network and egress after the walls, workspace claim and
	// mount mode, resources, timeout, and the task's UID. The fingerprint binds it,
	// and the Execution is built from it alone: changing the task afterwards does
	// not change where an approved call runs.
	// +optional
	Sandbox *DecidedSandbox `json:"sandbox,omitempty"`
	// proposerReason is the agent's own explanation; untrusted, shown as is.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	ProposerReason string `json:"proposerReason,omitempty"`
	// result, when set, makes this Approval a release of a call that ran: a Result
	// rule with action Ask holds the call's output from the model until a human
	// approves it (the model gets it) or denies it (the model gets a fixed refusal
	// instead). Absent on an Approval of a call before it runs.
	// +optional
	Result *ApprovalResult `json:"result,omitempty"`
}

// ApprovalResult is the output of a call that ran, held for a human to release.
type ApprovalResult struct {
	// executionName is the Execution that ran the call and keeps its whole output.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ExecutionName string `json:"executionName"`
	// outcome of the call.
	// +required
	Outcome Outcome `json:"outcome"`
	// exitCode of the tool, when it exited.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// output is what the model would see, after the redactions of the result
	// rules, secrets masked, cut to its head and tail.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Output string `json:"output,omitempty"`
}

// ApprovalSpec is a request for a human decision on one intent. Every field except
// votes is immutable; the admission policy lets each allowed approver append one
// vote, their own, until the approval is decided.
// +kubebuilder:validation:XValidation:rule="self.intentRef == oldSelf.intentRef && self.taskRef == oldSelf.taskRef && self.fingerprint == oldSelf.fingerprint && self.request == oldSelf.request && self.requestedBy == oldSelf.requestedBy && self.expiresAt == oldSelf.expiresAt && (has(self.approvers) == has(oldSelf.approvers)) && (!has(self.approvers) || self.approvers == oldSelf.approvers)",message="only spec.votes of an Approval may change: add your vote, and leave every other field as it is"
type ApprovalSpec struct {
	// intentRef names the ToolIntent this approval is for.
	// +required
	IntentRef LocalObjectReference `json:"intentRef"`
	// taskRef names the intent's AgentTask.
	// +required
	TaskRef LocalObjectReference `json:"taskRef"`
	// fingerprint binds the approval to exactly one call: SHA-256 over the canonical
	// JSON of task, tool, normalized input, rule, policy generation, walls and
	// sandbox.
	// +required
	// +kubebuilder:validation:MinLength=64
	// +kubebuilder:validation:MaxLength=128
	Fingerprint string `json:"fingerprint"`
	// request is what is asked, with secrets masked.
	// +required
	Request ApprovalRequest `json:"request"`
	// requestedBy is the user who created the intent; that user can never vote.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	RequestedBy string `json:"requestedBy"`
	// approvers lists who may vote and how many must approve; absent means anyone
	// with the approve verb, and one approval.
	// +optional
	Approvers *Approvers `json:"approvers,omitempty"`
	// expiresAt is when the approval expires if nobody decided.
	// +required
	ExpiresAt metav1.Time `json:"expiresAt"`

	// votes are the approvers' votes, one per person, in the order they were cast.
	// The approval is Denied by any counted Deny, and Approved once
	// approvers.required distinct people (default 1) approved; the requester never
	// counts. Votes are only appended: none is edited or removed. Default empty.
	// +optional
	// +listType=map
	// +listMapKey=user
	// +kubebuilder:default={}
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(v, self.exists_one(w, w.user == v.user))",message="spec.votes holds one vote per person: you already voted, and a vote is final"
	Votes []ApprovalVote `json:"votes,omitempty"`
}

// ApprovalStatus is written by the controller.
type ApprovalStatus struct {
	// state of the approval.
	// +optional
	State ApprovalState `json:"state,omitempty"`
	// decidedAt is when the controller first saw the votes decide (a Deny, or
	// enough approvals).
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
	// tally is the approvals counted out of those required, such as 1/2.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Tally string `json:"tally,omitempty"`
	// approvedBy are the people whose approvals count, in the order they voted.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	ApprovedBy []string `json:"approvedBy,omitempty"`
	// deniedBy is the person whose Deny denied the approval.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DeniedBy string `json:"deniedBy,omitempty"`
	// consumedByExecutionName names the Execution that used the approval.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConsumedByExecutionName string `json:"consumedByExecutionName,omitempty"`
	// message explains the state, for example why an approval was refused.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// notifications record each announcement of the approval to a
	// NotificationChannel, one per channel and event: a delivered one is never
	// sent again, also after a controller restart. At most 64
	// (MaxNotificationRecords).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Notifications []NotificationRecord `json:"notifications,omitempty"`
}

// NotificationRecord is the delivery of one event of an Approval to one channel.
type NotificationRecord struct {
	// channel is the NotificationChannel as NAMESPACE/NAME.
	// +required
	// +kubebuilder:validation:MaxLength=507
	Channel string `json:"channel"`
	// event announced.
	// +required
	Event NotificationEvent `json:"event"`
	// attempts made so far.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// lastAttemptAt is when the last attempt was made.
	// +optional
	LastAttemptAt *metav1.Time `json:"lastAttemptAt,omitempty"`
	// deliveredAt is when the receiver accepted the message; set once.
	// +optional
	DeliveredAt *metav1.Time `json:"deliveredAt,omitempty"`
	// lastError says why the last attempt failed; with attempts at the limit,
	// delivery was given up.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`
}

// Approval asks a human to allow or deny one ToolIntent.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=appr,categories=toolgate
// +kubebuilder:printcolumn:name="Task",type=string,JSONPath=`.spec.taskRef.name`
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.request.tool`
// +kubebuilder:printcolumn:name="Risk",type=string,JSONPath=`.spec.request.risk`
// +kubebuilder:printcolumn:name="Requester",type=string,JSONPath=`.spec.requestedBy`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Votes",type=string,JSONPath=`.status.tally`,description="Approvals counted out of those required"
// +kubebuilder:printcolumn:name="Expires",type=string,format=date-time,JSONPath=`.spec.expiresAt`,description="When the approval expires if nobody decides"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Intent",type=string,JSONPath=`.spec.intentRef.name`,priority=1
// +kubebuilder:printcolumn:name="Asked-By",type=string,JSONPath=`.spec.request.policyRuleRef.kind`,priority=1,description="What asked: ToolPolicy, ClusterToolPolicy, or ModeDefault (no rule matched; the task's mode asked)"
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.request.policyRuleRef.name`,priority=1,description="The policy that asked, or the task's mode for ModeDefault"
// +kubebuilder:printcolumn:name="Rule",type=string,JSONPath=`.spec.request.policyRuleRef.rule`,priority=1
// +kubebuilder:printcolumn:name="Approved-By",type=string,JSONPath=`.status.approvedBy`,priority=1,description="Whose approvals count"
// +kubebuilder:printcolumn:name="Denied-By",type=string,JSONPath=`.status.deniedBy`,priority=1
type Approval struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request and the human decision.
	// +required
	Spec ApprovalSpec `json:"spec"`
	// status is written by the controller.
	// +optional
	Status ApprovalStatus `json:"status,omitempty"`
}

// ApprovalList is a list of Approvals.
// +kubebuilder:object:root=true
type ApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Approval `json:"items"`
}

func init() {
	register(&Approval{}, &ApprovalList{})
}
