package v1alpha1

// Every label and annotation key toolgate reads or writes, in one place: the
// controller, the in-cluster pods, kubectl toolgate, the MCP endpoint, the admission
// policies and the docs all name these. Nothing of a task's own labels or
// annotations is copied onto what toolgate creates: an Argo CD tracking label on a
// task must never make its children look like synced resources.
const (
	// LabelTask names the AgentTask of an Approval, Execution, Job or pod, so that
	// people find everything of a task with kubectl get -l.
	LabelTask = "toolgate.dev/task"
	// LabelIntent names the ToolIntent of an Approval, Execution, Job or pod.
	LabelIntent = "toolgate.dev/intent"
	// LabelTurn is the model turn of a turn record.
	LabelTurn = "toolgate.dev/turn"
	// LabelExecution selects an Execution's pod (its NetworkPolicy fence and its
	// Job use it).
	LabelExecution = "toolgate.dev/execution"
	// LabelNetwork puts a sandbox pod behind the NetworkPolicy of its network walls.
	LabelNetwork = "toolgate.dev/network"
	// LabelGit marks toolgate's own workspace pods of a task (the git clone, change
	// and push, and the copy of another task's workspace) with their operation. The
	// admission policies keep these pods, named toolgate-git-…, to the controller.
	LabelGit = "toolgate.dev/git"
	// LabelSession marks a session pod; its value is the session's key.
	LabelSession = "toolgate.dev/session"
	// LabelJob marks a background job's own session pod; its value is the job's
	// Execution.
	LabelJob = "toolgate.dev/job"
	// LabelReplayOf marks the objects of an execution replay (the throwaway task
	// and the intents proposed into it) with the name of the task replayed.
	LabelReplayOf = "toolgate.dev/replay-of"
	// LabelGitCredentials marks a Secret a task may name in spec.workspace.git
	// (value "true"): naming a Secret in a task must not be enough to send it to
	// any host.
	LabelGitCredentials = "toolgate.dev/git-credentials"
	// LabelModelCredentials marks a Secret that a task may use as its model API key
	// (value ModelCredentialsValue). The controller sees no other Secret.
	LabelModelCredentials = "toolgate.dev/model-credentials"
	// LabelNotificationCredentials marks a Secret that a NotificationChannel may
	// read its webhook URL and signing key from (value "true"); the controller
	// reads no other Secret for notifications.
	LabelNotificationCredentials = "toolgate.dev/notification-credentials"
	// ModelCredentialsValue is the value of LabelModelCredentials that opts in.
	ModelCredentialsValue = "true"

	// AnnotationChangeRequest on an AgentTask asks the controller to record the
	// workspace's change now (kubectl toolgate diff sets it to a new value): the
	// task's change ConfigMap answers it, naming the same value in the same
	// annotation.
	AnnotationChangeRequest = "toolgate.dev/change-request"
	// AnnotationSession marks the intents an MCP session created, with the session
	// id.
	AnnotationSession = "toolgate.dev/mcp-session"
)
