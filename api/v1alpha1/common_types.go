package v1alpha1

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

// Approvers lists who may decide an Approval. An empty list means anyone who holds
// the `approve` verb on approvals in the namespace.
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
}

// LocalObjectReferenceTo is a reference to the object named name, or nil when name
// is empty: an optional reference is absent rather than naming nothing.
func LocalObjectReferenceTo(name string) *LocalObjectReference {
	if name == "" {
		return nil
	}
	return &LocalObjectReference{Name: name}
}
