package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NotificationChannelType is how a channel's messages are shaped and sent.
// +kubebuilder:validation:Enum=Slack;CloudEvents
type NotificationChannelType string

const (
	// ChannelSlack posts a message in Slack's blocks to an incoming webhook (also
	// accepted by Mattermost and others that take Slack's format).
	ChannelSlack NotificationChannelType = "Slack"
	// ChannelCloudEvents posts a CloudEvents 1.0 structured JSON event, signed with
	// HMAC-SHA256 (signingSecretRef).
	ChannelCloudEvents NotificationChannelType = "CloudEvents"
)

// NotificationEvent is a moment in an Approval's life that a channel may be told
// about.
// +kubebuilder:validation:Enum=Requested;Decided;Expired;Superseded
type NotificationEvent string

const (
	// EventRequested: an Approval was created and waits for a person (state Pending).
	EventRequested NotificationEvent = "Requested"
	// EventDecided: a person approved or denied it (state Approved, Denied, or
	// Consumed by the call it approved).
	EventDecided NotificationEvent = "Decided"
	// EventExpired: nobody decided before expiresAt, or the decision came too late.
	EventExpired NotificationEvent = "Expired"
	// EventSuperseded: the call was decided again before it ran; the approval is
	// never used.
	EventSuperseded NotificationEvent = "Superseded"
)

// SecretKeyReference names one key of a Secret in the channel's own namespace.
type SecretKeyReference struct {
	// name of the Secret. It must carry the label
	// toolgate.dev/notification-credentials=true: the controller sees no other.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// NotificationChannelSpec says where approvals of the namespace are announced.
// +kubebuilder:validation:XValidation:rule="self.type != 'CloudEvents' || has(self.signingSecretRef)",message="spec.signingSecretRef is required with type CloudEvents: receivers check each event's HMAC-SHA256 signature with it"
type NotificationChannelSpec struct {
	// type is Slack (an incoming webhook, a readable message in blocks) or
	// CloudEvents (a generic webhook carrying a CloudEvents 1.0 structured JSON
	// event, signed).
	// +required
	Type NotificationChannelType `json:"type"`
	// urlSecretRef names the Secret key holding the webhook URL (http or https).
	// The URL is a credential (an incoming webhook's URL is its key), so it is
	// never in the channel itself.
	// +required
	URLSecretRef SecretKeyReference `json:"urlSecretRef"`
	// signingSecretRef names the Secret key holding the HMAC-SHA256 key that signs
	// each CloudEvents delivery; required with type CloudEvents, unused with Slack.
	// +optional
	SigningSecretRef *SecretKeyReference `json:"signingSecretRef,omitempty"`
	// events are the moments announced; empty means all of Requested, Decided,
	// Expired and Superseded.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4
	Events []NotificationEvent `json:"events,omitempty"`
	// consoleURL is the address of a console where approvers look at approvals,
	// printed in each message; empty prints none. It is a link to look, never to
	// decide: deciding takes the approver's own credentials.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="spec.consoleURL must be an http or https address, for example https://console.example.com/approvals"
	ConsoleURL string `json:"consoleURL,omitempty"`
}

// NotificationChannelStatus is written by the controller.
type NotificationChannelStatus struct {
	// conditions: Ready (the Secrets are readable and the URL valid) and Delivering
	// (the last delivery succeeded, or why it failed).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// delivered counts the messages the receiver accepted.
	// +optional
	Delivered int64 `json:"delivered,omitempty"`
	// failedAttempts counts the attempts the receiver refused or did not answer.
	// +optional
	FailedAttempts int64 `json:"failedAttempts,omitempty"`
	// lastDeliveryTime is when the receiver last accepted a message.
	// +optional
	LastDeliveryTime *metav1.Time `json:"lastDeliveryTime,omitempty"`
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// NotificationChannel announces the Approvals of its namespace (of every namespace
// when it is in the controller's own) to a webhook. A message shows what is asked
// and how to decide with one's own credentials; it never carries a way to decide.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=nch,categories=toolgate
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Delivering",type=string,JSONPath=`.status.conditions[?(@.type=="Delivering")].status`,description="Whether the last delivery succeeded"
// +kubebuilder:printcolumn:name="Delivered",type=integer,JSONPath=`.status.delivered`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failedAttempts`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Delivering")].message`,priority=1
type NotificationChannel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says where and what to announce.
	// +required
	Spec NotificationChannelSpec `json:"spec"`
	// status is written by the controller.
	// +optional
	Status NotificationChannelStatus `json:"status,omitempty"`
}

// NotificationChannelList is a list of NotificationChannels.
// +kubebuilder:object:root=true
type NotificationChannelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NotificationChannel `json:"items"`
}

func init() {
	register(&NotificationChannel{}, &NotificationChannelList{})
}
