package v1alpha1

import "fmt"

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ToolName names a tool of the registry, for example bash or read_file.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]*$`
type ToolName string

// Built-in tools.
const (
	ToolBash      ToolName = "bash"
	ToolReadFile  ToolName = "read_file"
	ToolWriteFile ToolName = "write_file"
	ToolEditFile  ToolName = "edit_file"
	ToolGlob      ToolName = "glob"
	ToolGrep      ToolName = "grep"
	ToolListDir   ToolName = "list_dir"
	// The background-job tools act on the task's background jobs (bash with
	// runInBackground in a Session task); the controller answers them from its
	// record of the jobs, and they run in no sandbox.
	ToolJobOutput ToolName = "job_output"
	ToolJobList   ToolName = "job_list"
	ToolJobKill   ToolName = "job_kill"
	// ToolGitPush pushes a git workspace's change as one commit on a new branch
	// (spec.workspace.git.push). Only the controller proposes it, once the task
	// would succeed; no model or proposer sees or calls it.
	ToolGitPush ToolName = "git_push"
)

// DecisionAction is what the policy engine decided for an intent.
// +kubebuilder:validation:Enum=Allow;Ask;Deny;Redirect;Stop
type DecisionAction string

const (
	// DecisionAllow: the intent executes without a human.
	DecisionAllow DecisionAction = "Allow"
	// DecisionAsk: a human must approve before the intent executes.
	DecisionAsk DecisionAction = "Ask"
	// DecisionDeny: the intent never executes.
	DecisionDeny DecisionAction = "Deny"
	// DecisionRedirect: the intent never executes, and neither does any other call
	// of its turn that has not started; the model gets the rule's registered
	// instruction after the turn's tool results.
	DecisionRedirect DecisionAction = "Redirect"
	// DecisionStop: nothing of the intent's turn executes and the task ends Failed
	// (reason PolicyStopped), with no retry.
	DecisionStop DecisionAction = "Stop"
)

// CommandCategory is what a tool call or one part of a shell command does.
// +kubebuilder:validation:Enum=ReadOnly;Test;Build;Install;Write;Delete;VCSDestructive;Network;Privilege;Unknown
type CommandCategory string

const (
	CategoryReadOnly       CommandCategory = "ReadOnly"
	CategoryTest           CommandCategory = "Test"
	CategoryBuild          CommandCategory = "Build"
	CategoryInstall        CommandCategory = "Install"
	CategoryWrite          CommandCategory = "Write"
	CategoryDelete         CommandCategory = "Delete"
	CategoryVCSDestructive CommandCategory = "VCSDestructive"
	CategoryNetwork        CommandCategory = "Network"
	CategoryPrivilege      CommandCategory = "Privilege"
	CategoryUnknown        CommandCategory = "Unknown"
)

// Risk grades how much harm an action can do.
// +kubebuilder:validation:Enum=Low;Medium;High;Critical
type Risk string

const (
	RiskLow      Risk = "Low"
	RiskMedium   Risk = "Medium"
	RiskHigh     Risk = "High"
	RiskCritical Risk = "Critical"
)

// Approvers lists who may vote on an Approval and how many must approve. An empty
// list means anyone who holds the `approve` verb on approvals in the namespace.
// +kubebuilder:validation:XValidation:rule="!has(self.required) || self.required <= 1 || (has(self.groups) && size(self.groups) > 0) || !has(self.users) || size(self.users) == 0 || self.required <= size(self.users)",message="approvers.required is more than the users listed and no group is listed: the approval could never be granted; list more users, a group, or require fewer"
type Approvers struct {
	// users are Kubernetes user names (as in request.userInfo.username).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Users []string `json:"users,omitempty"`
	// groups are Kubernetes group names (as in request.userInfo.groups).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Groups []string `json:"groups,omitempty"`
	// required is how many distinct people must approve, 1 to 16; absent means 1.
	// The requester never counts, and any one approver's Deny denies.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Required int32 `json:"required,omitempty"`
}

// Quorum is how many distinct people must approve: required, or 1 when it is not set
// (or there is no approvers block).
func (a *Approvers) Quorum() int {
	if a == nil || a.Required < 1 {
		return 1
	}
	return int(a.Required)
}

// IsEmpty says whether the approvers name nobody and require no more than one
// approval: an Approval asked so carries no approvers block.
func (a *Approvers) IsEmpty() bool {
	return a == nil || len(a.Users) == 0 && len(a.Groups) == 0 && a.Required <= 1
}

// LocalObjectReferenceTo is a reference to the object named name, or nil when name
// is empty: an optional reference is absent rather than naming nothing.
func LocalObjectReferenceTo(name string) *LocalObjectReference {
	if name == "" {
		return nil
	}
	return &LocalObjectReference{Name: name}
}

// PolicyRuleKind is what decided a call: a rule of a ToolPolicy, a rule of a
// ClusterToolPolicy, or the task's mode when no rule matched (ModeDefault).
// +kubebuilder:validation:Enum=ToolPolicy;ClusterToolPolicy;ModeDefault
type PolicyRuleKind string

const (
	// PolicyRuleKindToolPolicy: a rule of a ToolPolicy of the object's namespace.
	PolicyRuleKindToolPolicy PolicyRuleKind = "ToolPolicy"
	// PolicyRuleKindClusterToolPolicy: a rule of a ClusterToolPolicy.
	PolicyRuleKindClusterToolPolicy PolicyRuleKind = "ClusterToolPolicy"
	// PolicyRuleKindModeDefault: no enforcing rule matched, and the task's mode
	// decided (ReadOnly, Edit or Auto; docs/policy.md says what each decides).
	PolicyRuleKindModeDefault PolicyRuleKind = "ModeDefault"
)

// PolicyRuleReference names what decided (or matched) a call: one rule of a
// ToolPolicy or a ClusterToolPolicy, at the policy's generation, or the default of
// the task's mode. It is built by NewPolicyRuleReference and ModeDefaultReference
// only, and shown as String says.
// +kubebuilder:validation:XValidation:rule="self.kind == 'ModeDefault' || has(self.rule)",message="rule is required for a ToolPolicy or ClusterToolPolicy reference: name the policy's rule, for example {kind: ToolPolicy, name: team, rule: allow-tests}"
// +kubebuilder:validation:XValidation:rule="self.kind != 'ModeDefault' || !has(self.rule)",message="rule must not be set for kind ModeDefault: no rule decided, the task's mode did; write {kind: ModeDefault, name: <the task's mode>}, or name the policy's kind for a rule"
// +kubebuilder:validation:XValidation:rule="self.kind != 'ModeDefault' || !has(self.generation)",message="generation must not be set for kind ModeDefault: a mode has no generation; write {kind: ModeDefault, name: <the task's mode>}"
// +kubebuilder:validation:XValidation:rule="self.kind != 'ModeDefault' || self.name in ['ReadOnly', 'Edit', 'Auto']",message="name of a ModeDefault reference is the task's mode: ReadOnly, Edit or Auto"
type PolicyRuleReference struct {
	// kind is ToolPolicy, ClusterToolPolicy or ModeDefault.
	// +required
	Kind PolicyRuleKind `json:"kind"`
	// name of the policy (a ToolPolicy of the object's namespace); for ModeDefault,
	// the task's mode: ReadOnly, Edit or Auto.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// generation of the policy when it decided; absent for ModeDefault, and where
	// a rule is counted across its policy's generations (ruleFires).
	// +optional
	// +kubebuilder:validation:Minimum=1
	Generation int64 `json:"generation,omitempty"`
	// rule of the policy, by name; required for ToolPolicy and ClusterToolPolicy,
	// absent for ModeDefault.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Rule string `json:"rule,omitempty"`
}

// NewPolicyRuleReference names rule of the policy of kind (ToolPolicy or
// ClusterToolPolicy) and name, at generation (0 for none).
func NewPolicyRuleReference(kind PolicyRuleKind, name string, generation int64, rule string) PolicyRuleReference {
	return PolicyRuleReference{Kind: kind, Name: name, Generation: generation, Rule: rule}
}

// ModeDefaultReference names the default of a task's mode, which decides when no
// rule does. An empty or unknown mode is ReadOnly, as the policy engine takes it.
func ModeDefaultReference(mode TaskMode) PolicyRuleReference {
	if mode != ModeEdit && mode != ModeAuto {
		mode = ModeReadOnly
	}
	return PolicyRuleReference{Kind: PolicyRuleKindModeDefault, Name: string(mode)}
}

// IsModeDefault says whether the task's mode decided, not a rule.
func (r PolicyRuleReference) IsModeDefault() bool { return r.Kind == PolicyRuleKindModeDefault }

// String is how the reference is shown, everywhere it is (the CLI, events, audit
// lines, condition messages, the metrics' rule label) and the key of its status.ruleFires
// entry: "Kind/policy/rule", for example ToolPolicy/team/allow-tests, or
// "ModeDefault/mode", for example ModeDefault/Edit. A policy name has no slash, so
// the form is unique. The generation is not part of it: it says which version of
// the rule decided, not which rule.
func (r PolicyRuleReference) String() string {
	if r.IsModeDefault() {
		return string(r.Kind) + "/" + r.Name
	}
	return string(r.Kind) + "/" + r.Name + "/" + r.Rule
}

// WithGeneration is String with the policy's generation, for example
// "ToolPolicy/team/allow-tests (generation 3)": for messages that say which version
// of the rule decided. A ModeDefault reference has no generation and shows as
// String does.
func (r PolicyRuleReference) WithGeneration() string {
	if r.IsModeDefault() {
		return r.String()
	}
	return fmt.Sprintf("%s (generation %d)", r.String(), r.Generation)
}

// Policy is the policy's "Kind/name", for example ClusterToolPolicy/baseline; ""
// for ModeDefault.
func (r PolicyRuleReference) Policy() string {
	if r.IsModeDefault() {
		return ""
	}
	return string(r.Kind) + "/" + r.Name
}

// SameRule says whether r and o name the same rule, whatever its generation. Every
// ModeDefault reference is the same rule, whichever mode decided: a mode default
// names no approvers and no rule of anyone's.
func (r PolicyRuleReference) SameRule(o PolicyRuleReference) bool {
	if r.IsModeDefault() || o.IsModeDefault() {
		return r.IsModeDefault() && o.IsModeDefault()
	}
	return r.Kind == o.Kind && r.Name == o.Name && r.Rule == o.Rule
}
