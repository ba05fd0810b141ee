package v1alpha1

// Condition types. Every condition toolgate writes uses one of these types and one of
// the reasons below, so that tooling (kubectl wait, Argo CD health checks, alerts) can
// rely on them.
const (
	// ConditionReady on an AgentTask: the workspace exists and the task can run.
	// On a ToolPolicy or ClusterToolPolicy: every rule compiled and every example passed,
	// so the policy is used for decisions.
	ConditionReady = "Ready"
	// ConditionAwaitingApproval on an AgentTask: at least one intent waits for a human.
	ConditionAwaitingApproval = "AwaitingApproval"
	// ConditionSucceeded on an AgentTask: the task finished with a result.
	ConditionSucceeded = "Succeeded"
	// ConditionFailed on an AgentTask: the task ended without a result (budget, error, cancel).
	ConditionFailed = "Failed"

	// ConditionArchived on an AgentTask: the records of its finished calls go to the
	// archive, and the calls leave the cluster after the retention window. False
	// says why history stays in etcd: no archive is configured, or it is unavailable.
	ConditionArchived = "Archived"

	// ConditionValidated on a ToolIntent: the input passed the tool's schema and the
	// runtime checks (visibility, workspace paths, read-before-edit, budgets).
	ConditionValidated = "Validated"
	// ConditionDecided on a ToolIntent: the policy engine produced a decision.
	ConditionDecided = "Decided"
	// ConditionApproved on a ToolIntent: only present when the decision was Ask; True once
	// a human approved and the approval was consumed.
	ConditionApproved = "Approved"
	// ConditionExecuted on a ToolIntent: an Execution ran (or was refused) for the intent.
	ConditionExecuted = "Executed"
	// ConditionObserved on a ToolIntent: the observation for the model is written. This
	// is the terminal condition of every intent, whatever its outcome.
	ConditionObserved = "Observed"

	// ConditionComplete on an Execution: the Job finished and its result was read.
	ConditionComplete = "Complete"
)

// Condition reasons.
const (
	// ReasonArchiving (Archived=True): finished calls are archived, then retired.
	ReasonArchiving = "Archiving"
	// ReasonNoArchive (Archived=False): the controller has no archive
	// (--archive-dsn-file); nothing is deleted and history grows in etcd.
	ReasonNoArchive = "NoArchive"
	// ReasonArchiveUnavailable (Archived=False): the archive did not confirm the
	// records of calls due to leave the cluster; they stay until it does.
	ReasonArchiveUnavailable = "ArchiveUnavailable"
	// ReasonWorkspaceReady: the workspace claim exists.
	ReasonWorkspaceReady = "WorkspaceReady"
	// ReasonWorkspacePending: the workspace claim is being provisioned or does not exist yet.
	ReasonWorkspacePending = "WorkspacePending"
	// ReasonWorkspaceClaimNotOwned: a claim of the name the task's own claim would
	// have (TASK-workspace) exists and is not controlled by the task; the task waits
	// (Ready=False) until it is gone, and never writes into it.
	ReasonWorkspaceClaimNotOwned = "WorkspaceClaimNotOwned"
	// ReasonWorkspaceCloning: the clone of spec.workspace.git is running; the task's
	// calls wait for it.
	ReasonWorkspaceCloning = "WorkspaceCloning"
	// Why a clone of spec.workspace.git failed (Ready=False; the task's calls wait):
	// the URL is not one toolgate clones, no repository is there, the revision is
	// no branch, tag or commit of it, the host refused the credentials (or its key
	// is not in known_hosts), the host cannot be reached (tried again), the
	// credentials Secret is missing or not labelled toolgate.dev/git-credentials,
	// or something else went wrong.
	ReasonGitURLInvalid          = "GitURLInvalid"
	ReasonGitRepositoryNotFound  = "GitRepositoryNotFound"
	ReasonGitRevisionNotFound    = "GitRevisionNotFound"
	ReasonGitCredentialsRefused  = "GitCredentialsRefused"
	ReasonGitHostUnreachable     = "GitHostUnreachable"
	ReasonGitCredentialsNotFound = "GitCredentialsNotFound"
	ReasonGitCloneFailed         = "GitCloneFailed"
	// ReasonWorkspaceCopying: the copy of spec.workspace.copyOf's workspace into
	// the task's claim is running; the task's calls wait for it.
	ReasonWorkspaceCopying = "WorkspaceCopying"
	// ReasonCopySourceNotFound: the AgentTask spec.workspace.copyOf.taskRef names
	// does not exist (yet); the copy waits for it (Ready=False).
	ReasonCopySourceNotFound = "CopySourceNotFound"
	// ReasonCopySourceNotReady: the task to copy has no workspace to copy yet (its
	// claim does not exist, or its clone or copy has not finished); the copy waits
	// for it (Ready=False).
	ReasonCopySourceNotReady = "CopySourceNotReady"
	// ReasonCopySourceUnusable: the task to copy can never be copied (it is the
	// task itself, or it ended without a workspace); the task fails.
	ReasonCopySourceUnusable = "CopySourceUnusable"
	// ReasonWorkspaceCopyFailed: the copy pod failed (the tree did not fit in the
	// claim, a file could not be read or written, the pod ended without a result);
	// the task fails with the pod's reason. Ready=False with it too while a pod not
	// the task's is in the copy pod's way (delete it and the copy goes on).
	ReasonWorkspaceCopyFailed = "WorkspaceCopyFailed"
	// ReasonPushDenied: the task's change was not pushed because its git_push call
	// was denied (by policy, by a human, or its approval expired); the server is
	// unchanged and the change can still be exported.
	ReasonPushDenied = "PushDenied"
	// ReasonPushFailed: the task's change could not be pushed (the change could not
	// be read, the branch exists, the workspace changed after approval, the server
	// refused); the message says which.
	ReasonPushFailed = "PushFailed"
	// ReasonRunning: the task is taking turns.
	ReasonRunning = "Running"
	// ReasonIntentsAwaitingApproval: one or more intents wait for a human decision.
	ReasonIntentsAwaitingApproval = "IntentsAwaitingApproval"
	// ReasonNoPendingApprovals: nothing waits for a human.
	ReasonNoPendingApprovals = "NoPendingApprovals"
	// ReasonCompleted: the task finished with a result.
	ReasonCompleted = "Completed"
	// ReasonMarkedDone: the owner of an external-agent task marked it done.
	ReasonMarkedDone = "MarkedDone"
	// ReasonCancelled: the owner cancelled the task (AgentTask Failed; spec.lifecycle Cancelled), or the
	// proposer its call before it ran (ToolIntent Executed=False; spec.cancel).
	ReasonCancelled = "Cancelled"
	// ReasonTurnBudgetExhausted: the task used its maximum number of turns.
	ReasonTurnBudgetExhausted = "TurnBudgetExhausted"
	// ReasonIntentBudgetExhausted: the task used its maximum number of intents.
	ReasonIntentBudgetExhausted = "IntentBudgetExhausted"
	// ReasonRefusalBudgetExhausted: too many consecutive validation failures or denials.
	ReasonRefusalBudgetExhausted = "RefusalBudgetExhausted"
	// ReasonTokenBudgetExhausted: the model used its token budget.
	ReasonTokenBudgetExhausted = "TokenBudgetExhausted"
	// ReasonModelError: the model endpoint returned an error that retries did not cure
	// (for example HTTP 401), refused the task, or cut its final answer at its length
	// limit. The message carries the provider's words with secrets masked.
	ReasonModelError = "ModelError"
	// ReasonPolicyStopped: a Stop rule decided one of the task's calls; nothing of
	// that turn ran and the task takes no more turns.
	ReasonPolicyStopped = "PolicyStopped"
	// ReasonCompletionDenied: a Deny rule with when: Completion refused the model's
	// final answer.
	ReasonCompletionDenied = "CompletionDenied"
	// ReasonModelUnavailable: the next turn cannot start yet (Ready=False). The API key
	// Secret named by spec.agent.model.apiKeySecretRef is missing, the endpoint failed
	// in a way that may pass (rate limit, server error, timeout), or a turn record
	// cannot be read. The message says which; the controller retries by itself.
	ReasonModelUnavailable = "ModelUnavailable"

	// ReasonInputValid: the intent passed validation.
	ReasonInputValid = "InputValid"
	// ReasonInputInvalid: the intent failed validation; the message lists every error.
	ReasonInputInvalid = "InputInvalid"
	// ReasonPolicyAllow, ReasonPolicyAsk, ReasonPolicyDeny: the decision's action.
	ReasonPolicyAllow = "Allow"
	ReasonPolicyAsk   = "Ask"
	ReasonPolicyDeny  = "Deny"
	// ReasonApprovalPending: the Approval waits for a human.
	ReasonApprovalPending = "ApprovalPending"
	// ReasonApprovalGranted: the Approval was approved and consumed by this intent.
	ReasonApprovalGranted = "ApprovalGranted"
	// ReasonGrantUsed: the call was asked, and runs on an approver's earlier
	// ApprovalGrant of the task (one of its uses), without a new Approval.
	ReasonGrantUsed = "GrantUsed"
	// ReasonApprovalDenied: a human denied the Approval.
	ReasonApprovalDenied = "ApprovalDenied"
	// ReasonApprovalExpired: nobody decided before expiresAt.
	ReasonApprovalExpired = "ApprovalExpired"
	// ReasonFingerprintMismatch: the Approval's fingerprint no longer matches the intent.
	ReasonFingerprintMismatch = "FingerprintMismatch"
	// ReasonRedecided: the call was decided again just before it would have run,
	// and the policies in force then were stricter than the recorded decision.
	ReasonRedecided = "Redecided"
	// ReasonWaitingForSiblings: batch preflight holds this intent while a sibling of the
	// same turn waits for approval.
	ReasonWaitingForSiblings = "WaitingForSiblings"
	// ReasonWaitingForWorkspace: the intent's task has not finished cloning its
	// workspace (spec.workspace.git), so the call waits; it is not failed.
	ReasonWaitingForWorkspace = "WaitingForWorkspace"
	// ReasonTurnRedirected: a Redirect decision of the intent's turn consumed it;
	// nothing was executed.
	ReasonTurnRedirected = "TurnRedirected"
	// ReasonTurnStopped: a Stop decision of the intent's turn consumed it; nothing
	// was executed.
	ReasonTurnStopped = "TurnStopped"
	// ReasonExecutionRequested: the intent names its Execution, which is being
	// created (the name is recorded first, so only one writer creates it).
	ReasonExecutionRequested = "ExecutionRequested"
	// ReasonExecutionCreated: the Execution exists and runs.
	ReasonExecutionCreated = "ExecutionCreated"
	// ReasonExecutionFinished: the Execution finished; see the observation outcome.
	ReasonExecutionFinished = "ExecutionFinished"
	// ReasonBackgroundStarted: the Execution is a background job that started; the
	// observation says so, and the job runs on (job_output, job_kill).
	ReasonBackgroundStarted = "BackgroundJobStarted"
	// ReasonNotExecuted: nothing was executed for this intent.
	ReasonNotExecuted = "NotExecuted"
	// ReasonObservationWritten: the observation is written.
	ReasonObservationWritten = "ObservationWritten"
	// ReasonResultAwaitingRelease: the call ran, and a Result rule with action Ask
	// holds its output from the model until a human releases it (an Approval with
	// request.result); the model's next turn waits.
	ReasonResultAwaitingRelease = "ResultAwaitingRelease"

	// ReasonPolicyCompiled: every rule compiled and every example passed.
	ReasonPolicyCompiled = "Compiled"
	// ReasonPolicyInvalid: a rule failed to compile or an example failed; the message
	// names the rule.
	ReasonPolicyInvalid = "Invalid"

	// ReasonJobSucceeded, ReasonJobFailed: the Execution's Job finished.
	ReasonJobSucceeded = "JobSucceeded"
	ReasonJobFailed    = "JobFailed"
	// ReasonJobPending: the Execution's Job or pod exists but the tool has not started
	// (scheduling, image pull, runner install); the message says what it waits for.
	ReasonJobPending = "JobPending"
	// ReasonJobRunning: the tool is running.
	ReasonJobRunning = "JobRunning"
	// ReasonSessionPending: the call waits for its session pod to take it (isolation
	// Session); the message says what the session waits for.
	ReasonSessionPending = "SessionPending"
	// ReasonSessionRunning: the call was delivered to its session pod and runs. A
	// finished call in a session ends JobSucceeded or JobFailed, as in a Job.
	ReasonSessionRunning = "SessionRunning"
	// ReasonJobToolAnswered: a background-job tool (job_output, job_list, job_kill)
	// was answered by the controller from its record of the task's jobs; no
	// sandbox ran.
	ReasonJobToolAnswered = "JobToolAnswered"
	// ReasonJobInvalid: the Execution could not be turned into a Job; the message
	// names the field. Nothing ran.
	ReasonJobInvalid = "JobInvalid"
	// ReasonWallsWidened: a NetworkPolicy other than toolgate's own selects the
	// call's pod and allows it traffic its network walls deny (NetworkPolicies add
	// up), so the call was not run. The message names the policy and how to exclude
	// toolgate's pods from it.
	ReasonWallsWidened = "WallsWidened"
)

// Conditions and reasons of a NotificationChannel.
const (
	// ConditionDelivering says whether the channel's last delivery succeeded.
	ConditionDelivering = "Delivering"

	// ReasonChannelReady: the channel's Secrets are readable and its URL valid.
	ReasonChannelReady = "ChannelReady"
	// ReasonSecretUnavailable: a Secret the channel names is missing, lacks the key,
	// or is not labelled toolgate.dev/notification-credentials=true.
	ReasonSecretUnavailable = "SecretUnavailable"
	// ReasonURLInvalid: the Secret's URL is not an http or https address.
	ReasonURLInvalid = "URLInvalid"
	// ReasonDelivered: the receiver accepted the last message.
	ReasonDelivered = "Delivered"
	// ReasonDeliveryFailed: the receiver refused or did not answer the last attempt.
	ReasonDeliveryFailed = "DeliveryFailed"
)
