package v1alpha1

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TaskMode decides which tools are visible at all (the first gate) and what happens
// when no policy rule matches.
// +kubebuilder:validation:Enum=ReadOnly;Edit;Auto
type TaskMode string

const (
	// ModeReadOnly: only read-only tools are visible; nothing that writes ever runs.
	ModeReadOnly TaskMode = "ReadOnly"
	// ModeEdit: every tool is visible; read-only operations are allowed, anything else
	// asks a human unless a policy rule says otherwise.
	ModeEdit TaskMode = "Edit"
	// ModeAuto: every tool is visible; reads, tests and builds are allowed and
	// workspace writes too; destructive, network, privilege and unknown operations ask.
	ModeAuto TaskMode = "Auto"
)

// AgentTaskSpec is what a person (or a GitOps repository) asks an agent to do. The
// goal, the agent's kind and the workspace are fixed when the task is created: its
// calls were proposed, decided and run for them.
// +kubebuilder:validation:XValidation:rule="!has(self.lifecycle) || self.lifecycle != 'Done' || has(self.agent.external)",message="spec.lifecycle Done finishes a task whose agent is external; a task with agent.model finishes with the model's final answer. Set spec.lifecycle to Cancelled to stop it"
// +kubebuilder:validation:XValidation:rule="!has(self.budgets) || !has(self.budgets.defaultTimeoutSeconds) || !has(self.budgets.maxTimeoutSeconds) || self.budgets.defaultTimeoutSeconds <= self.budgets.maxTimeoutSeconds",message="budgets.defaultTimeoutSeconds must not exceed budgets.maxTimeoutSeconds"
type AgentTaskSpec struct {
	// goal is the user's request, in their words. It is sent to the model as the task.
	// Immutable: every turn, and a replay, reads it as the task's first message.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.goal is immutable: the task's turns were taken toward it, and the model and a replay read it as the task's first message; create a new task for another goal"
	Goal string `json:"goal"`

	// mode decides which tools are visible and the default decision when no policy rule
	// matches. ReadOnly (default) shows only read-only tools; Edit shows all tools and
	// asks for anything that is not read-only; Auto also allows tests, builds and
	// workspace writes without asking.
	// +optional
	// +kubebuilder:default=ReadOnly
	Mode TaskMode `json:"mode,omitempty"`

	// tools optionally narrows the visible tools to this allow-list (after the mode's
	// own filter). Empty means every tool the mode allows. Each is a tool a task's
	// agent may call: bash, read_file, write_file, edit_file, glob, grep, list_dir,
	// and (with isolation Session) job_output, job_list, job_kill.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Enum=bash;read_file;write_file;edit_file;glob;grep;list_dir;job_output;job_list;job_kill
	Tools []ToolName `json:"tools,omitempty"`

	// workspace is the volume the tools work on, mounted at /workspace in every Execution.
	// +required
	Workspace WorkspaceSpec `json:"workspace"`

	// sandbox describes the container every Execution of this task runs in.
	// +optional
	// +kubebuilder:default={}
	Sandbox SandboxSpec `json:"sandbox,omitempty"`

	// agent says who proposes tool calls: a model toolgate talks to, or an external agent.
	// +required
	Agent AgentSpec `json:"agent"`

	// budgets end runaway tasks with a clear condition. Every budget has a default, so
	// an omitted budgets block gets them all.
	// +optional
	// +kubebuilder:default={}
	Budgets Budgets `json:"budgets,omitempty"`

	// lifecycle is what the task's owner wants of it: Active (the default) runs it;
	// Done finishes a task whose agent is external, which becomes Succeeded with
	// reason MarkedDone once no intent is still in flight; Cancelled stops the task:
	// no new intent is accepted, running calls are stopped, and the task becomes
	// Failed with reason Cancelled. It moves only away from Active (Active to Done or
	// Cancelled, Done to Cancelled) and never back: a task that was told to end
	// ends. To go on, create a new task.
	// +optional
	// +kubebuilder:default=Active
	// +kubebuilder:validation:XValidation:rule="self == oldSelf || oldSelf == 'Active' || (oldSelf == 'Done' && self == 'Cancelled')",message="spec.lifecycle cannot go back: Active may become Done or Cancelled and Done may become Cancelled, never Active again; a task told to end ends. Create a new task to go on"
	Lifecycle TaskLifecycle `json:"lifecycle,omitempty"`

	// ttlSecondsAfterFinished is how long the task stays in the cluster after it
	// ended (Succeeded or Failed). It is then deleted with everything it owns, but
	// only once the archive holds its record and the records of all its calls
	// (docs/archive.md). Unset, the controller's default applies
	// (--task-ttl-after-finished). With no archive configured, no task is deleted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=31536000
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// TaskLifecycle is what a task's owner wants of it.
// +kubebuilder:validation:Enum=Active;Done;Cancelled
type TaskLifecycle string

const (
	// LifecycleActive: the task runs (the default).
	LifecycleActive TaskLifecycle = "Active"
	// LifecycleDone: the owner of an external-agent task says it is finished.
	LifecycleDone TaskLifecycle = "Done"
	// LifecycleCancelled: the owner stops the task.
	LifecycleCancelled TaskLifecycle = "Cancelled"
)

// IsCancelled reports whether the task's owner cancelled it (spec.lifecycle
// Cancelled).
func (t *AgentTask) IsCancelled() bool { return t.Spec.Lifecycle == LifecycleCancelled }

// IsMarkedDone reports whether the task's owner marked it done (spec.lifecycle
// Done).
func (t *AgentTask) IsMarkedDone() bool { return t.Spec.Lifecycle == LifecycleDone }

// WorkspaceSpec names the volume the tools work on: an existing claim, or a claim
// that the task creates and owns (optionally seeded from a git repository, or with
// a copy of another task's workspace).
// +kubebuilder:validation:XValidation:rule="has(self.existingClaim) != has(self.volumeClaim)",message="set exactly one of workspace.existingClaim or workspace.volumeClaim"
// +kubebuilder:validation:XValidation:rule="!has(self.git) || has(self.volumeClaim)",message="workspace.git needs workspace.volumeClaim: the repository is cloned into a claim the task owns"
// +kubebuilder:validation:XValidation:rule="!has(self.copyOf) || has(self.volumeClaim)",message="workspace.copyOf needs workspace.volumeClaim: the other task's workspace is copied into a claim this task owns, never into a claim it shares"
// +kubebuilder:validation:XValidation:rule="!has(self.copyOf) || !has(self.git)",message="set at most one of workspace.git or workspace.copyOf: a workspace is seeded once, from a repository or from another task's workspace"
// +kubebuilder:validation:XValidation:rule="has(self.existingClaim) == has(oldSelf.existingClaim) && (!has(self.existingClaim) || self.existingClaim == oldSelf.existingClaim) && has(self.volumeClaim) == has(oldSelf.volumeClaim) && (!has(self.volumeClaim) || self.volumeClaim == oldSelf.volumeClaim)",message="spec.workspace.existingClaim and spec.workspace.volumeClaim are immutable: the task's calls were decided for and ran in that workspace; create a new task to work in another claim"
// +kubebuilder:validation:XValidation:rule="has(self.git) == has(oldSelf.git)",message="spec.workspace.git cannot be added or removed: the workspace is cloned once, before the task is Ready, and the tools are kept from its git directory only while git is set; create a new task to work on another repository"
// +kubebuilder:validation:XValidation:rule="has(self.copyOf) == has(oldSelf.copyOf)",message="spec.workspace.copyOf cannot be added or removed: the workspace is copied once, before the task is Ready; create a new task to copy another workspace"
type WorkspaceSpec struct {
	// existingClaim is the name of a PersistentVolumeClaim in the task's namespace.
	// toolgate never deletes it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ExistingClaim string `json:"existingClaim,omitempty"`

	// volumeClaim asks toolgate to create a claim owned by the task (deleted with it).
	// +optional
	VolumeClaim *WorkspaceVolumeClaim `json:"volumeClaim,omitempty"`

	// git seeds a task-owned claim with a clone of a repository at a revision.
	// +optional
	Git *GitSource `json:"git,omitempty"`

	// copyOf seeds a task-owned claim with a copy of another task's workspace, as
	// that task's tools see it at /workspace (a git task's worktree, never its git
	// directory). The other task's claim is mounted read-only and is never changed.
	// Needs volumeClaim; not with git.
	// +optional
	CopyOf *WorkspaceCopy `json:"copyOf,omitempty"`
}

// WorkspaceCopy is the task whose workspace is copied into a task's claim before
// the task is Ready. The copy is made once: the task works on its copy, whatever
// the other task does after.
type WorkspaceCopy struct {
	// taskRef names an AgentTask of the same namespace, not this one. A task that
	// does not exist yet, whose claim does not exist yet or that has not finished
	// seeding its own workspace (a clone, a copy) is waited for. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workspace.copyOf.taskRef is immutable: the workspace is copied from that task once; create a new task to copy another task's workspace"
	TaskRef LocalObjectReference `json:"taskRef"`
}

// WorkspaceVolumeClaim describes the claim toolgate creates for a task.
type WorkspaceVolumeClaim struct {
	// storage is the requested size. Default 1Gi.
	// +optional
	// +kubebuilder:default="1Gi"
	Storage resource.Quantity `json:"storage,omitempty"`
	// storageClassName selects the storage class; empty uses the cluster default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// GitSource is a repository and revision cloned into the workspace before the task
// is Ready. The claim then holds the worktree, which every tool sees at /workspace,
// and the git directory beside it, which no tool sandbox mounts: the agent changes
// files, never the record of the commit it started from.
type GitSource struct {
	// url of the repository: https://, http://, ssh://, git://, or user@host:path
	// for ssh. Credentials never go in the URL (secretRef). Immutable: the workspace
	// is cloned from it once.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workspace.git.url is immutable: the workspace is cloned from it once; create a new task to work on another repository"
	URL string `json:"url"`
	// revision is a branch, a tag, a commit (full or abbreviated hash), or HEAD
	// (the default) for the repository's default branch. Branches and tags are
	// cloned shallow. Immutable, like url.
	// +optional
	// +kubebuilder:default=HEAD
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workspace.git.revision is immutable: the workspace is cloned at it once; create a new task to start from another revision"
	Revision string `json:"revision,omitempty"`
	// secretRef names a Secret of the task's namespace with the credentials to
	// clone: keys token (or password) and optionally username for http(s), or
	// ssh-privatekey and known_hosts for ssh. The Secret must be labelled
	// toolgate.dev/git-credentials: "true". It is mounted into the clone pod only,
	// never into a tool's sandbox. A changed Secret is tried again. Its name is
	// required: leave secretRef out for a repository that needs no credentials.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// push, when set, pushes the agent's change as one commit on a new branch of
	// the repository once the task would succeed: as a git_push call of the
	// controller's, decided by policy (Ask unless a rule says otherwise), so a human
	// approves what leaves the cluster. The task succeeds once it was pushed, and
	// fails (PushDenied, PushFailed) when it was not.
	// +optional
	Push *GitPush `json:"push,omitempty"`
}

// GitPush is where a task's change is pushed.
type GitPush struct {
	// branch is the new branch the commit is pushed to. It must not exist on the
	// server: the push never moves or overwrites a branch.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._/-]*$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.contains('//') && !self.endsWith('/') && !self.endsWith('.lock') && !self.endsWith('.')",message="spec.workspace.git.push.branch is not a valid git branch name (no '..', '//', trailing '/', '.' or '.lock')"
	Branch string `json:"branch"`
	// secretRef names the Secret with the credentials to push (same keys and
	// label as spec.workspace.git.secretRef); default the clone's secretRef. It is
	// mounted into the push pod only.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// NetworkMode says whether Executions may reach the network.
// +kubebuilder:validation:Enum=None;AllowList
type NetworkMode string

const (
	// NetworkNone denies all egress (the default).
	NetworkNone NetworkMode = "None"
	// NetworkAllowList allows egress only to the listed destinations.
	NetworkAllowList NetworkMode = "AllowList"
)

// SandboxSpec describes the container every Execution of a task runs in.
type SandboxSpec struct {
	// image is the container image the tools run in. The runner binary is injected
	// into it, so any image with the tools the task needs works. Empty uses the
	// controller's default workspace image.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`

	// runtimeClassName selects a RuntimeClass (for example gVisor or Kata) for stronger
	// isolation. Empty uses the cluster default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// resources of the tool container. Default: requests 100m CPU and 128Mi memory,
	// limits 1 CPU and 512Mi memory. A resources block replaces the default whole,
	// so it must set limits.cpu and limits.memory (requests default to the limits);
	// claims are not supported.
	// +optional
	// +kubebuilder:validation:XValidation:rule="has(self.limits) && 'cpu' in self.limits && 'memory' in self.limits",message="spec.sandbox.resources.limits must set both cpu and memory: a resources block replaces the defaults (requests 100m CPU and 128Mi, limits 1 CPU and 512Mi), and a tool container without limits could take the whole node. Set both, or leave resources out for the defaults"
	// +kubebuilder:validation:XValidation:rule="(!has(self.limits) || size(self.limits) <= 16) && (!has(self.requests) || size(self.requests) <= 16)",message="spec.sandbox.resources: name at most 16 resources in limits and in requests"
	// +kubebuilder:validation:XValidation:rule="!has(self.claims) || size(self.claims) == 0",message="spec.sandbox.resources.claims is not supported: a tool's sandbox gets no dynamically allocated resources; remove it"
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// network is the egress the tool container gets. Default: none at all.
	// +optional
	// +kubebuilder:default={}
	Network NetworkSpec `json:"network,omitempty"`

	// isolation says where each call runs. PerCall (the default) runs every call in
	// a pod of its own, a Job made for it: nothing of one call outlives it, at about
	// three seconds of pod start per call. Session keeps warm session pods for the
	// task, one per sandbox a call is decided to run in (the task's, and the
	// read-only one with no network that read-only calls get), and runs each call in
	// one of them as a fresh process: a call takes a fraction of a second, every
	// process it started is killed when it ends, and the pod's walls are the same
	// as a Job's. What a session shares between calls is its pod: its /tmp and the
	// kernel's view of one long-lived container.
	// +optional
	Isolation SandboxIsolation `json:"isolation,omitempty"`
}

// SandboxIsolation says whether calls run in a pod each or in the task's sessions.
// +kubebuilder:validation:Enum=PerCall;Session
type SandboxIsolation string

const (
	// IsolationPerCall runs each call as a Job of its own (the default).
	IsolationPerCall SandboxIsolation = "PerCall"
	// IsolationSession runs each call in a warm session pod of the task.
	IsolationSession SandboxIsolation = "Session"
)

// NetworkSpec is the egress an Execution gets.
// +kubebuilder:validation:XValidation:rule="self.mode == 'AllowList' || !has(self.egress) || size(self.egress) == 0",message="network.egress is only allowed with network.mode AllowList"
// +kubebuilder:validation:XValidation:rule="self.mode == 'AllowList' || !has(self.clusterDNS) || !self.clusterDNS",message="network.clusterDNS is only allowed with network.mode AllowList"
type NetworkSpec struct {
	// mode is None (default: all egress denied) or AllowList.
	// +optional
	// +kubebuilder:default=None
	Mode NetworkMode `json:"mode,omitempty"`
	// egress lists the destinations allowed with mode AllowList.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Egress []EgressRule `json:"egress,omitempty"`
	// clusterDNS allows DNS queries (UDP and TCP port 53) to the cluster's DNS
	// server, the kube-system pods labelled k8s-app=kube-dns (as CoreDNS is
	// deployed), so that the call can resolve names; only with mode AllowList. The
	// DNS Service's address is no egress destination of its own: connections to a
	// Service reach its pods, and NetworkPolicy is enforced on the pods' addresses.
	// Resolving a name opens no connection: what the call connects to must still be
	// listed in egress. But DNS is a channel out: a cluster DNS server that forwards
	// names it does not serve (CoreDNS does by default) carries whatever the call
	// puts in the names it looks up, and answers tell it the cluster's Service
	// names. Allow it where the task's egress is already trusted to reach out.
	// +optional
	ClusterDNS bool `json:"clusterDNS,omitempty"`
}

// EgressRule allows traffic to one CIDR block, optionally on some ports only.
type EgressRule struct {
	// cidr is the destination block, IPv4 or IPv6, for example 10.0.0.0/8: an
	// address and its prefix length, the address the block's first.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self) == cidr(self).masked()",message="must be a CIDR block such as 10.0.0.0/8 or fd00::/8: an address and its prefix length, the address the block's first (10.0.0.0/8, not 10.0.0.1/8)"
	CIDR string `json:"cidr"`
	// ports limits the rule to these TCP ports; empty means every port.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	Ports []int32 `json:"ports,omitempty"`
}

// AgentSpec says who proposes tool calls. Whether that is a model or an external
// agent is fixed when the task is created.
// +kubebuilder:validation:XValidation:rule="has(self.model) != has(self.external)",message="set exactly one of agent.model or agent.external"
// +kubebuilder:validation:XValidation:rule="has(self.model) == has(oldSelf.model)",message="spec.agent cannot switch between model and external: the task's turns and intents were proposed by the one it has; create a new task for the other"
type AgentSpec struct {
	// model makes toolgate run the agent loop against an OpenAI-compatible endpoint.
	// +optional
	Model *ModelAgent `json:"model,omitempty"`
	// external means intents are created by an outside agent (or a person with
	// kubectl); toolgate governs them but proposes nothing itself.
	// +optional
	External *ExternalAgent `json:"external,omitempty"`
}

// AgentKind is which agent proposes a task's tool calls.
// +kubebuilder:validation:Enum=Model;External
type AgentKind string

const (
	// AgentKindModel: toolgate runs the agent loop against spec.agent.model.
	AgentKindModel AgentKind = "Model"
	// AgentKindExternal: an outside agent creates the intents (spec.agent.external).
	AgentKindExternal AgentKind = "External"
)

// Kind is which of model and external a is.
func (a AgentSpec) Kind() AgentKind {
	if a.Model != nil {
		return AgentKindModel
	}
	return AgentKindExternal
}

// ModelAgent is an OpenAI-compatible Chat Completions endpoint with tool calling.
type ModelAgent struct {
	// baseURL of the endpoint, for example https://api.openai.com/v1 or a vLLM,
	// llama.cpp or Ollama server's /v1 URL.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	BaseURL string `json:"baseURL"`
	// model name sent with each request.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Model string `json:"model"`
	// apiKeySecretRef names a Secret key in the task's namespace holding the API key:
	// name and key are both required. Leave it out for endpoints that need none.
	// +optional
	// +kubebuilder:validation:XValidation:rule="has(self.name) && size(self.name) > 0",message="spec.agent.model.apiKeySecretRef.name must name the Secret that holds the API key; leave apiKeySecretRef out for an endpoint that needs none"
	APIKeySecretRef *corev1.SecretKeySelector `json:"apiKeySecretRef,omitempty"`
	// requestTimeoutSeconds bounds one model request. Default 120.
	// +optional
	// +kubebuilder:default=120
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	RequestTimeoutSeconds int32 `json:"requestTimeoutSeconds,omitempty"`
}

// ExternalAgent marks a task whose intents come from outside toolgate.
type ExternalAgent struct {
	// description of the agent, shown to people: kubectl toolgate trace prints it
	// beside the agent kind.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`

	// proposers are who may propose tool calls for this task. Anyone allowed to create
	// ToolIntents in the namespace can name any task in spec.taskRef; an intent whose
	// spec.requestedBy (checked by admission to be its creator) is not a proposer fails
	// validation and nothing runs.
	// +required
	Proposers Proposers `json:"proposers"`
}

// Proposers name the Kubernetes identities that may propose tool calls for a task.
// An intent counts when its requestedBy is one of users, is the service account user
// (system:serviceaccount:NAMESPACE:NAME) of one of serviceAccounts, or when it claims
// in spec.requestedByGroups one of groups (admission checks the claim is the
// creator's own).
// +kubebuilder:validation:XValidation:rule="(has(self.users) ? size(self.users) : 0) + (has(self.groups) ? size(self.groups) : 0) + (has(self.serviceAccounts) ? size(self.serviceAccounts) : 0) > 0",message="agent.external.proposers must name at least one user, group or service account that may propose tool calls for this task, for example proposers: {users: [alice]} or proposers: {serviceAccounts: [{namespace: team-a, name: coding-agent}]}"
type Proposers struct {
	// users are Kubernetes user names, as the API server authenticates them (what
	// kubectl auth whoami prints).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	Users []string `json:"users,omitempty"`
	// groups are Kubernetes group names; a member proposes by claiming the group in
	// the intent's spec.requestedByGroups (kubectl toolgate propose does).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	Groups []string `json:"groups,omitempty"`
	// serviceAccounts are service accounts, each by namespace and name, for
	// example {namespace: team-a, name: coding-agent} for an agent running in a pod.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	ServiceAccounts []ServiceAccountReference `json:"serviceAccounts,omitempty"`
}

// ServiceAccountReference names a service account by its namespace and name.
type ServiceAccountReference struct {
	// namespace of the service account.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="namespace of a service account is a namespace's name: lower-case letters, digits and '-', starting and ending with a letter or digit, for example team-a"
	Namespace string `json:"namespace"`
	// name of the service account.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$')",message="name of a service account is lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, for example coding-agent"
	Name string `json:"name"`
}

// String is the service account as namespace/name, for example team-a/coding-agent.
func (s ServiceAccountReference) String() string { return s.Namespace + "/" + s.Name }

// UserName is the user name the API server authenticates the service account as:
// system:serviceaccount:NAMESPACE:NAME.
func (s ServiceAccountReference) UserName() string {
	return "system:serviceaccount:" + s.Namespace + ":" + s.Name
}

// Budgets end runaway tasks. Each exhausted budget fails the task with its own reason.
type Budgets struct {
	// maxTurns is the number of model turns. Default 20.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxTurns int32 `json:"maxTurns,omitempty"`
	// maxIntents is the number of ToolIntents the task may have. Default 100.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxIntents int32 `json:"maxIntents,omitempty"`
	// maxApprovalRequests is how many Approvals the task may create; further asks are
	// denied. Default 10.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MaxApprovalRequests int32 `json:"maxApprovalRequests,omitempty"`
	// maxConsecutiveRefusals is how many validation failures or denials in a row end
	// the task (a model stuck repeating a refused call). Default 5.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxConsecutiveRefusals int32 `json:"maxConsecutiveRefusals,omitempty"`
	// maxTokens optionally bounds the model tokens the task may use.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTokens *int64 `json:"maxTokens,omitempty"`
	// defaultTimeoutSeconds applies to a tool call that names no timeout. Default 120.
	// +optional
	// +kubebuilder:default=120
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	DefaultTimeoutSeconds int32 `json:"defaultTimeoutSeconds,omitempty"`
	// maxTimeoutSeconds clamps every tool call's timeout. Default 600.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	MaxTimeoutSeconds int32 `json:"maxTimeoutSeconds,omitempty"`
	// maxOutputBytes caps the combined output (stdout and stderr) an observation
	// carries back to the model, in bytes before masking (head and tail are kept,
	// the cut is announced). Default 32768, at most 262144 (MaxOutputBytesLimit).
	// +optional
	// +kubebuilder:default=32768
	// +kubebuilder:validation:Minimum=256
	// +kubebuilder:validation:Maximum=262144
	MaxOutputBytes int32 `json:"maxOutputBytes,omitempty"`
	// approvalTTLSeconds is how long an Approval waits before it expires. Default 3600.
	// +optional
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=604800
	ApprovalTTLSeconds int32 `json:"approvalTTLSeconds,omitempty"`
}

// TaskPhase summarizes a task for people; conditions carry the detail.
// +kubebuilder:validation:Enum=Pending;Running;AwaitingApproval;Succeeded;Failed
type TaskPhase string

const (
	TaskPending          TaskPhase = "Pending"
	TaskRunning          TaskPhase = "Running"
	TaskAwaitingApproval TaskPhase = "AwaitingApproval"
	TaskSucceeded        TaskPhase = "Succeeded"
	TaskFailed           TaskPhase = "Failed"
)

// IntentCounts counts a task's intents by outcome.
type IntentCounts struct {
	// total is every intent of the task.
	// +optional
	Total int32 `json:"total,omitempty"`
	// inFlight are intents without an observation yet.
	// +optional
	InFlight int32 `json:"inFlight,omitempty"`
	// byOutcome counts observed intents per outcome, one entry per outcome that
	// occurred, sorted by outcome: a list keyed by outcome, so that a client reads
	// it with a JSONPath filter (byOutcome[?(@.outcome=="Succeeded")].count) and
	// its bound is the number of outcomes.
	// +optional
	// +listType=map
	// +listMapKey=outcome
	// +kubebuilder:validation:MaxItems=16
	ByOutcome []OutcomeCount `json:"byOutcome,omitempty"`
}

// OutcomeCount is how many of a task's observed intents ended with one outcome.
type OutcomeCount struct {
	// outcome of the intents counted.
	// +required
	Outcome Outcome `json:"outcome"`
	// count of the task's intents observed with that outcome.
	// +required
	Count int32 `json:"count"`
}

// Of is how many of the task's observed intents ended with outcome o.
func (c IntentCounts) Of(o Outcome) int32 {
	for _, oc := range c.ByOutcome {
		if oc.Outcome == o {
			return oc.Count
		}
	}
	return 0
}

// OutcomeCounts is counts as byOutcome holds them: one entry per outcome counted,
// sorted by outcome; nil for none.
func OutcomeCounts(counts map[Outcome]int32) []OutcomeCount {
	var out []OutcomeCount
	for o, n := range counts {
		if n > 0 {
			out = append(out, OutcomeCount{Outcome: o, Count: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Outcome < out[j].Outcome })
	return out
}

// AgentTaskStatus is rebuilt by the controller from the task's children.
type AgentTaskStatus struct {
	// conditions: Ready, AwaitingApproval, Succeeded, Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase summarizes the conditions for people.
	// +optional
	Phase TaskPhase `json:"phase,omitempty"`
	// agentKind is Model or External, as spec.agent says: for kubectl get, whose
	// columns cannot tell which of the two spec.agent holds.
	// +optional
	AgentKind AgentKind `json:"agentKind,omitempty"`
	// turn is the current (or last) turn number, starting at 0.
	// +optional
	Turn int32 `json:"turn,omitempty"`
	// workspaceClaimName is the claim mounted as the workspace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	WorkspaceClaimName string `json:"workspaceClaimName,omitempty"`
	// intents counts the task's intents by outcome.
	// +optional
	Intents IntentCounts `json:"intents,omitempty"`
	// approvalRequests counts the Approvals the task created.
	// +optional
	ApprovalRequests int32 `json:"approvalRequests,omitempty"`
	// tokensUsed is the model tokens used so far.
	// +optional
	TokensUsed int64 `json:"tokensUsed,omitempty"`
	// result is the model's final answer, set only when the task Succeeded. An
	// answer longer than 65536 bytes (MaxResultBytes) is cut between characters,
	// and ends saying so and naming the turn whose record holds the whole answer.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Result string `json:"result,omitempty"`
	// ruleFires counts, per rule, how often a Redirect rule redirected one of the
	// task's calls or a Completion rule refused its final answer, from the recorded
	// decisions and completion checks, which maxFires and cooldownSeconds are
	// enforced from; one entry per rule, keyed by id (the rule as Kind/name/rule).
	// It shows at most 256 rules (MaxRuleFires), the ones that fired last.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=256
	RuleFires []RuleFires `json:"ruleFires,omitempty"`
	// workspace is what the clone of spec.workspace.git resolved, or where the
	// copy of spec.workspace.copyOf came from, and the push of the change.
	// +optional
	Workspace *WorkspaceStatus `json:"workspace,omitempty"`
	// history is what the task's calls that left the cluster add to its counts and
	// to the checks of its later calls: they were archived, then deleted after the
	// retention window (docs/archive.md). intents, turn and ruleFires above include
	// them.
	// +optional
	History *CallHistory `json:"history,omitempty"`
}

// CallHistory is the running total of a task's retired calls: the calls of whole
// turns, all observed, that the archive holds and retention deleted from the
// cluster. What the task's status and the validation and decision of its later
// calls need from those calls is kept here, so they count as if still present.
type CallHistory struct {
	// intents counts the retired intents (inFlight is always 0).
	// +optional
	Intents IntentCounts `json:"intents,omitempty"`
	// throughTurn is the last turn whose calls were retired: every call of a turn
	// up to it that is counted here left the cluster.
	// +optional
	ThroughTurn int32 `json:"throughTurn,omitempty"`
	// consecutiveRefusals is how many of the last retired calls in a row were
	// refusals (budgets.maxConsecutiveRefusals goes on counting from it).
	// +optional
	ConsecutiveRefusals int32 `json:"consecutiveRefusals,omitempty"`
	// ruleFires counts the fires of every rule that fired for a retired call, all of
	// them (maxFires is enforced from these and the live calls). A retirement that
	// would need more than 256 rules (MaxRuleFires) does not happen: the calls stay.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=256
	RuleFires []RuleFires `json:"ruleFires,omitempty"`
	// baselines are the last content hashes of the files the retired calls read or
	// wrote, oldest first: what a later edit_file or write_file is checked against.
	// At most 128 (MaxHistoryBaselines); the oldest are dropped, and an edit of a
	// dropped file needs a new read_file first.
	// +optional
	// +listType=map
	// +listMapKey=path
	// +kubebuilder:validation:MaxItems=128
	Baselines []FileBaseline `json:"baselines,omitempty"`
	// approvalRequests counts the Approvals of the retired calls
	// (budgets.maxApprovalRequests goes on counting from it).
	// +optional
	ApprovalRequests int32 `json:"approvalRequests,omitempty"`
	// deniedFingerprints are the fingerprints of the retired calls a human denied,
	// newest last: the same call is not asked again. At most 64
	// (MaxHistoryDenials); beyond, the oldest are dropped and such a call is asked
	// again.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	DeniedFingerprints []string `json:"deniedFingerprints,omitempty"`
	// retiring are the intents counted here whose deletion has not been seen yet:
	// they are not counted again while they are still listed.
	// +optional
	// +listType=map
	// +listMapKey=uid
	// +kubebuilder:validation:MaxItems=200
	Retiring []RetiringIntent `json:"retiring,omitempty"`
}

// FileBaseline is the content hash a retired call observed for a workspace file.
type FileBaseline struct {
	// path relative to the workspace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path"`
	// sha256 of the content, hex.
	// +required
	// +kubebuilder:validation:MaxLength=64
	SHA256 string `json:"sha256"`
	// intent that observed it.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Intent string `json:"intent"`
}

// RetiringIntent names an intent counted in the history that is being deleted.
type RetiringIntent struct {
	// name of the ToolIntent.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid of the ToolIntent.
	// +required
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
}

// WorkspaceStatus is what seeded a task's workspace (a clone, a copy) and the
// push of its change.
type WorkspaceStatus struct {
	// commit is the full hash the workspace was cloned at.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Commit string `json:"commit,omitempty"`
	// ref is the branch or tag the revision named (refs/heads/..., refs/tags/...);
	// empty for a commit.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Ref string `json:"ref,omitempty"`
	// clonedAt is when the clone finished.
	// +optional
	ClonedAt *metav1.Time `json:"clonedAt,omitempty"`
	// cloneJobName names the Job of the clone in progress or the last one tried.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CloneJobName string `json:"cloneJobName,omitempty"`
	// copiedFrom is the claim of spec.workspace.copyOf's task that the workspace is
	// (being) copied from: the folder of it that task's tools see.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CopiedFrom string `json:"copiedFrom,omitempty"`
	// copiedAt is when the copy finished. A task with copiedAt never copies again.
	// +optional
	CopiedAt *metav1.Time `json:"copiedAt,omitempty"`
	// copyPodName names the pod of the copy in progress, or the one that made it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CopyPodName string `json:"copyPodName,omitempty"`
	// copySkipped counts what the copy left out: entries of the copied tree that
	// are no regular file, directory or symlink (devices, FIFOs, sockets), and
	// entries it could not read.
	// +optional
	CopySkipped int32 `json:"copySkipped,omitempty"`
	// push is where the push of spec.workspace.git.push stands, once the task
	// would have succeeded.
	// +optional
	Push *PushStatus `json:"push,omitempty"`
}

// PushStatus is where a task's push stands.
type PushStatus struct {
	// branch the change is (to be) pushed to.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Branch string `json:"branch,omitempty"`
	// intentName names the git_push ToolIntent that pushes it, once the change
	// was read.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	IntentName string `json:"intentName,omitempty"`
	// commit is the commit pushed, once it was.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Commit string `json:"commit,omitempty"`
	// message says where the push stands, or why it did not happen.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// RuleFires is how often one rule acted in a task. NewRuleFires builds it.
// +kubebuilder:validation:XValidation:rule="self.policyRuleRef.kind != 'ModeDefault'",message="ruleFires counts the fires of a policy's rules: policyRuleRef.kind is ToolPolicy or ClusterToolPolicy (a mode default never fires)"
// +kubebuilder:validation:XValidation:rule="!has(self.policyRuleRef.generation)",message="policyRuleRef.generation must not be set in ruleFires: a rule's fires are counted across its policy's generations"
// +kubebuilder:validation:XValidation:rule="has(self.policyRuleRef.rule) && self.id == self.policyRuleRef.kind + '/' + self.policyRuleRef.name + '/' + self.policyRuleRef.rule",message="id must be policyRuleRef as kind/name/rule, for example ToolPolicy/team/plan-rm"
type RuleFires struct {
	// id is policyRuleRef as Kind/name/rule, for example ToolPolicy/team/plan-rm:
	// the key of the list. At most 525 bytes (MaxPolicyRuleIDBytes).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=525
	ID string `json:"id"`
	// policyRuleRef names the rule, without a generation: its fires are counted
	// across its policy's generations.
	// +required
	PolicyRuleRef PolicyRuleReference `json:"policyRuleRef"`
	// when is ToolCall, Completion or Result.
	// +required
	When RuleEvent `json:"when"`
	// fires is how often it acted.
	// +required
	Fires int32 `json:"fires"`
	// lastFiredAt is when it last acted.
	// +optional
	LastFiredAt *metav1.Time `json:"lastFiredAt,omitempty"`
}

// NewRuleFires is the ruleFires entry of the rule ref names, counting no fire yet:
// its id is ref.String(), and the generation is left out.
func NewRuleFires(ref PolicyRuleReference, when RuleEvent) RuleFires {
	ref.Generation = 0
	return RuleFires{ID: ref.String(), PolicyRuleRef: ref, When: when}
}

// CompletionCheck is the completion gate's verdict on a model task's final answer,
// recorded with the turn that gave it (see docs/policy.md).
type CompletionCheck struct {
	// turn whose answer was checked.
	// +required
	Turn int32 `json:"turn"`
	// action is Allow (the answer is accepted), Redirect (the model gets the
	// instruction and goes on) or Deny (the task fails with the reason).
	// +required
	Action DecisionAction `json:"action"`
	// policyRuleRef names the Completion rule that decided, at its policy's
	// generation; absent when no rule did (the answer is accepted).
	// +optional
	PolicyRuleRef *PolicyRuleReference `json:"policyRuleRef,omitempty"`
	// reason in words a person can check.
	// +optional
	Reason string `json:"reason,omitempty"`
	// instruction of the deciding Redirect rule.
	// +optional
	Instruction string `json:"instruction,omitempty"`
	// nonActingHits are Completion rules that matched without deciding.
	// +optional
	NonActingHits []RuleHit `json:"nonActingHits,omitempty"`
	// checkedAt is when the check was made.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
}

// DecidedBy is the rule that decided, as PolicyRuleReference.String shows it; ""
// when no rule did.
func (c CompletionCheck) DecidedBy() string {
	if c.PolicyRuleRef == nil {
		return ""
	}
	return c.PolicyRuleRef.String()
}

// AgentTask is the unit of work: a goal, a workspace, a sandbox, an agent and budgets.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=agt,categories=toolgate
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.agentKind`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Failed")].reason`,description="Why the task failed (the Failed condition's reason); Running while it runs"
// +kubebuilder:printcolumn:name="Turn",type=integer,JSONPath=`.status.turn`
// +kubebuilder:printcolumn:name="Intents",type=integer,JSONPath=`.status.intents.total`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`,priority=1
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.agent.model.model`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1,description="The Ready condition's reason: why a task is Pending (WorkspaceCloning, ModelUnavailable, ...)"
// +kubebuilder:printcolumn:name="In-Flight",type=integer,JSONPath=`.status.intents.inFlight`,priority=1
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.intents.byOutcome[?(@.outcome=="Succeeded")].count`,priority=1
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.intents.byOutcome[?(@.outcome=="Failed")].count`,priority=1
// +kubebuilder:printcolumn:name="Denied",type=integer,JSONPath=`.status.intents.byOutcome[?(@.outcome=="Denied")].count`,priority=1
// +kubebuilder:printcolumn:name="Approvals",type=integer,JSONPath=`.status.approvalRequests`,priority=1
// +kubebuilder:printcolumn:name="Tokens",type=integer,JSONPath=`.status.tokensUsed`,priority=1
type AgentTask struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired task.
	// +required
	Spec AgentTaskSpec `json:"spec"`
	// status is observed by the controller.
	// +optional
	Status AgentTaskStatus `json:"status,omitempty"`
}

// AgentTaskList is a list of AgentTasks.
// +kubebuilder:object:root=true
type AgentTaskList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentTask `json:"items"`
}

func init() {
	register(&AgentTask{}, &AgentTaskList{})
}
