package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ExecutionPhase is where an Execution is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type ExecutionPhase string

const (
	ExecutionPending   ExecutionPhase = "Pending"
	ExecutionRunning   ExecutionPhase = "Running"
	ExecutionSucceeded ExecutionPhase = "Succeeded"
	ExecutionFailed    ExecutionPhase = "Failed"
)

// ErrorKind says why an Execution failed.
// +kubebuilder:validation:Enum=ExitCode;Timeout;Stale;Exception;Aborted
type ErrorKind string

const (
	// ErrorExitCode: the tool exited non-zero.
	ErrorExitCode ErrorKind = "ExitCode"
	// ErrorTimeout: the tool was killed at its timeout (or the Job's deadline).
	ErrorTimeout ErrorKind = "Timeout"
	// ErrorStale: edit_file refused because the file changed since it was read.
	ErrorStale ErrorKind = "Stale"
	// ErrorException: the runner could not run the tool (bad path, escape, I/O error,
	// missing result).
	ErrorException ErrorKind = "Exception"
	// ErrorAborted: the Job or Pod was deleted before it finished.
	ErrorAborted ErrorKind = "Aborted"
)

// EnvVar is one environment variable set for the tool.
type EnvVar struct {
	// name of the variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// value of the variable.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value,omitempty"`
}

// SandboxProfile is the resolved sandbox an Execution runs in.
type SandboxProfile struct {
	// image the tool runs in.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image"`
	// runtimeClassName for the pod, when set.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
	// resources of the tool container.
	// +optional
	Resources SandboxResources `json:"resources,omitempty"`
	// network egress allowed.
	// +optional
	Network NetworkSpec `json:"network,omitempty"`
	// workspaceClaimName is the claim mounted at /workspace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	WorkspaceClaimName string `json:"workspaceClaimName"`
	// workspaceSubPath is the folder of the claim mounted at /workspace; empty for
	// the whole claim. A git task's is its worktree, so that the git directory
	// beside it (the record of the commit it was cloned at) is in no tool's reach.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z]+$`
	WorkspaceSubPath string `json:"workspaceSubPath,omitempty"`
	// readOnlyWorkspace mounts the workspace read-only: set by the walls.
	// +optional
	ReadOnlyWorkspace bool `json:"readOnlyWorkspace,omitempty"`
	// isolation is the task's: Session runs the call in the task's session pod of
	// this profile, PerCall (or empty) in a Job of its own.
	// +optional
	Isolation SandboxIsolation `json:"isolation,omitempty"`
}

// SandboxResources are the tool container's requests and limits, as the task's
// spec.sandbox.resources sets them.
type SandboxResources struct {
	// limits of the tool container, by resource name.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Limits corev1.ResourceList `json:"limits,omitempty"`
	// requests of the tool container, by resource name.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Requests corev1.ResourceList `json:"requests,omitempty"`
}

// Requirements is r as a container takes it.
func (r SandboxResources) Requirements() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Limits: r.Limits.DeepCopy(), Requests: r.Requests.DeepCopy()}
}

// SandboxWalls are restrictions the decision puts on a call's sandbox, tighter than
// the task's own: the policy decided on what the call is, and the sandbox holds it to
// that. A call allowed because it is read-only gets both walls, whatever the task's
// mode and egress, so a call that was misjudged read-only fails instead of writing or
// reaching the network.
type SandboxWalls struct {
	// readOnlyWorkspace mounts the workspace read-only.
	// +optional
	ReadOnlyWorkspace bool `json:"readOnlyWorkspace,omitempty"`
	// noNetwork denies all egress, whatever the task's network allows.
	// +optional
	NoNetwork bool `json:"noNetwork,omitempty"`
	// noOutputCopy keeps the call's full output out of the workspace: a Result rule
	// in scope may act on it (withhold, replace or redact it), and a copy in the
	// workspace would be there for a later call to read. The output is then in the
	// Execution's status (masked) and the container log only.
	// +optional
	NoOutputCopy bool `json:"noOutputCopy,omitempty"`
	// reason says why the walls apply, for example "every part of the call is
	// read-only".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// ExecutionSpec is one invocation, fixed when it is created.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: an Execution records one invocation"
type ExecutionSpec struct {
	// intentRef names the ToolIntent this invocation runs.
	// +required
	IntentRef LocalObjectReference `json:"intentRef"`
	// taskRef names the intent's AgentTask.
	// +required
	TaskRef LocalObjectReference `json:"taskRef"`
	// tool to run.
	// +required
	Tool ToolName `json:"tool"`
	// input is the validated, normalized input.
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Input runtime.RawExtension `json:"input"`
	// workdir is the working directory, relative to the workspace root.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Workdir string `json:"workdir,omitempty"`
	// env is set for the tool; nothing else from the controller leaks in.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []EnvVar `json:"env,omitempty"`
	// timeoutSeconds after which the tool's process group is killed.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	TimeoutSeconds int32 `json:"timeoutSeconds"`
	// maxOutputBytes caps the combined output (stdout and stderr, head and tail)
	// the status shows, in bytes before masking; at most 262144
	// (MaxOutputBytesLimit).
	// +required
	// +kubebuilder:validation:Minimum=256
	// +kubebuilder:validation:Maximum=262144
	MaxOutputBytes int32 `json:"maxOutputBytes"`
	// baselineSHA256 is the content hash edit_file (and an overwriting write_file)
	// checks before writing.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	BaselineSHA256 string `json:"baselineSHA256,omitempty"`
	// sandbox is the resolved sandbox profile: the task's sandbox with the walls
	// applied.
	// +required
	Sandbox SandboxProfile `json:"sandbox"`
	// walls are the decision's walls this invocation was built with; absent when the
	// decision set none and the task's sandbox applies as it is.
	// +optional
	Walls *SandboxWalls `json:"walls,omitempty"`
	// approvalRef names the Approval this invocation consumed; absent when the
	// call was allowed without one.
	// +optional
	ApprovalRef *LocalObjectReference `json:"approvalRef,omitempty"`
	// fingerprint of the intent's decision.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Fingerprint string `json:"fingerprint,omitempty"`
}

// ApprovalName is the name of the Approval the invocation consumed, or "" when it
// consumed none.
func (s ExecutionSpec) ApprovalName() string {
	if s.ApprovalRef == nil {
		return ""
	}
	return s.ApprovalRef.Name
}

// ToolFacts are tool-specific facts the runner reports.
type ToolFacts struct {
	// contentSHA256 of the file after read_file, write_file or edit_file.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ContentSHA256 string `json:"contentSHA256,omitempty"`
	// linesAdded by edit_file or write_file.
	// +optional
	LinesAdded int32 `json:"linesAdded,omitempty"`
	// linesRemoved by edit_file or write_file.
	// +optional
	LinesRemoved int32 `json:"linesRemoved,omitempty"`
	// binary is true when read_file found a binary file.
	// +optional
	Binary bool `json:"binary,omitempty"`
	// matches counted by grep or glob.
	// +optional
	Matches int32 `json:"matches,omitempty"`
}

// ExecutionStatus is read from the Job, its Pod and the runner's result.
type ExecutionStatus struct {
	// conditions: Complete.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// phase of the execution.
	// +optional
	Phase ExecutionPhase `json:"phase,omitempty"`
	// jobName of the Job running the invocation.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	JobName string `json:"jobName,omitempty"`
	// podName of the pod that ran the call: the Job's pod, or the session pod.
	// While a Job's pod exists, `kubectl logs pod/NAME -c tool` shows the call's
	// whole output.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PodName string `json:"podName,omitempty"`
	// sessionName is the session pod the call was delivered to (isolation Session),
	// recorded before the call starts; empty for a call run as a Job.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SessionName string `json:"sessionName,omitempty"`
	// background is set once a background job (bash with runInBackground) started
	// in its session: its intent is observed then, and the Execution runs on until
	// the job ends, is killed (job_kill) or its task ends.
	// +optional
	Background *BackgroundStatus `json:"background,omitempty"`
	// startTime of the tool.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime of the tool.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// exitCode of the tool.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// durationMillis is how long the tool ran, in milliseconds, as the runner
	// measured it.
	// +optional
	DurationMillis int64 `json:"durationMillis,omitempty"`
	// errorKind when the execution did not succeed.
	// +optional
	ErrorKind ErrorKind `json:"errorKind,omitempty"`
	// message explains the error plainly.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// stdoutBytes is the full size of stdout.
	// +optional
	StdoutBytes int64 `json:"stdoutBytes,omitempty"`
	// stderrBytes is the full size of stderr.
	// +optional
	StderrBytes int64 `json:"stderrBytes,omitempty"`
	// truncated is true when output beyond maxOutputBytes was cut.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// outputSHA256 of the full combined output, as the runner saw it.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	OutputSHA256 string `json:"outputSHA256,omitempty"`
	// output is the captured output: head and tail within maxOutputBytes, masked
	// (secrets replaced, control bytes and bytes that are not UTF-8 written as
	// \xNN), and cut again in the middle, the cut marked, where masking made it take
	// more than 1 MiB as stored (MaxOutputTextBytes).
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Output string `json:"output,omitempty"`
	// maskedSecrets says what masking found in the output before it was kept: how
	// many secrets, and which detector rules found them. Absent when none was.
	// +optional
	MaskedSecrets *MaskedSecrets `json:"maskedSecrets,omitempty"`
	// artifactPath is the workspace copy of the full output, readable with read_file.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ArtifactPath string `json:"artifactPath,omitempty"`
	// facts are tool-specific facts from the runner.
	// +optional
	Facts *ToolFacts `json:"facts,omitempty"`
	// sandbox is what the runner observed about its own container (uid,
	// readOnlyRootFilesystem), as evidence that the sandbox held.
	// +optional
	Sandbox *ObservedSandbox `json:"sandbox,omitempty"`
}

// BackgroundStatus is the record of a background job.
type BackgroundStatus struct {
	// startedAt is when the job's runner reported it started.
	// +required
	StartedAt metav1.Time `json:"startedAt"`
	// stoppedBy says who stopped the job before it ended by itself: the job_kill
	// intent, or the task's end.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	StoppedBy string `json:"stoppedBy,omitempty"`
}

// ObservedSandbox is what the runner saw of its own container.
type ObservedSandbox struct {
	// uid the runner ran as.
	// +optional
	UID int64 `json:"uid"`
	// readOnlyRootFilesystem is true when writing to / failed.
	// +optional
	ReadOnlyRootFilesystem bool `json:"readOnlyRootFilesystem"`
}

// Execution is one invocation of a tool, run as a sandboxed Job.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=exec,categories=toolgate
// +kubebuilder:printcolumn:name="Intent",type=string,JSONPath=`.spec.intentRef.name`
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.tool`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.status.errorKind`,description="Why the execution did not succeed: ExitCode, Timeout, Stale, Exception or Aborted"
// +kubebuilder:printcolumn:name="Exit",type=integer,JSONPath=`.status.exitCode`
// +kubebuilder:printcolumn:name="Duration(ms)",type=integer,JSONPath=`.status.durationMillis`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Task",type=string,JSONPath=`.spec.taskRef.name`,priority=1
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.status.podName`,priority=1
// +kubebuilder:printcolumn:name="Truncated",type=boolean,JSONPath=`.status.truncated`,priority=1
type Execution struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the invocation; immutable.
	// +required
	Spec ExecutionSpec `json:"spec"`
	// status is read from the Job and the runner.
	// +optional
	Status ExecutionStatus `json:"status,omitempty"`
}

// ExecutionList is a list of Executions.
// +kubebuilder:object:root=true
type ExecutionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Execution `json:"items"`
}

func init() {
	register(&Execution{}, &ExecutionList{})
}

// MaskedSecrets is what secret masking found in a call's output: the values are
// gone, and this says only how many and of what kind.
type MaskedSecrets struct {
	// count is how many secrets were masked in the output kept.
	// +required
	// +kubebuilder:validation:Minimum=0
	Count int32 `json:"count"`
	// kinds are the names of the detector rules that found them
	// ("aws-access-token", "private-key", ...), sorted, each once.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=128
	Kinds []string `json:"kinds,omitempty"`
}
