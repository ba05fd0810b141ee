package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Outcome is how an intent ended, as the model sees it.
// +kubebuilder:validation:Enum=Succeeded;Failed;TimedOut;ValidationFailed;Denied;ApprovalDenied;ApprovalExpired;Aborted;Redirected;Stopped
type Outcome string

const (
	// OutcomeSucceeded: the tool ran and exited 0.
	OutcomeSucceeded Outcome = "Succeeded"
	// OutcomeFailed: the tool ran and failed (non-zero exit, stale edit, error).
	OutcomeFailed Outcome = "Failed"
	// OutcomeTimedOut: the tool ran and was killed at its timeout.
	OutcomeTimedOut Outcome = "TimedOut"
	// OutcomeValidationFailed: the input was invalid; nothing was executed.
	OutcomeValidationFailed Outcome = "ValidationFailed"
	// OutcomeDenied: a policy denied the call; nothing was executed.
	OutcomeDenied Outcome = "Denied"
	// OutcomeApprovalDenied: a human denied the call; nothing was executed.
	OutcomeApprovalDenied Outcome = "ApprovalDenied"
	// OutcomeApprovalExpired: nobody decided in time; nothing was executed.
	OutcomeApprovalExpired Outcome = "ApprovalExpired"
	// OutcomeAborted: the call was stopped: before it ran (its task ended, or its
	// proposer cancelled it: executed is false and nothing ran), or while it ran (its
	// Job or Pod was deleted, its task or its proposer cancelled it: executed is
	// true, and it may have had effects).
	OutcomeAborted Outcome = "Aborted"
	// OutcomeRedirected: a Redirect rule decided this call or another call of its
	// turn; nothing of the turn was executed, and the rule's instruction goes to the
	// model.
	OutcomeRedirected Outcome = "Redirected"
	// OutcomeStopped: a Stop rule decided this call or another call of its turn;
	// nothing of the turn was executed and the task ended.
	OutcomeStopped Outcome = "Stopped"
)

// ProposedBy records where an intent came from.
type ProposedBy struct {
	// provider is the model provider or agent kind, for example openai, vllm or external.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Provider string `json:"provider,omitempty"`
	// model that proposed the call.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Model string `json:"model,omitempty"`
	// toolCallID is the model's id for the call, echoed back with the observation.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ToolCallID string `json:"toolCallID,omitempty"`
}

// ToolIntentSpec is one proposed tool call. It is immutable but for cancel, which may
// only go from false to true: a changed proposal is a new intent.
//
// The first rule names every field but cancel (a CEL object cannot be compared
// without one of its fields; has() because an optional field may be absent); a field added here must be added to it, which
// TestToolIntentSpecImmutabilityNamesEveryField checks.
// +kubebuilder:validation:XValidation:rule="self.taskRef == oldSelf.taskRef && has(self.turn) == has(oldSelf.turn) && (!has(self.turn) || self.turn == oldSelf.turn) && has(self.index) == has(oldSelf.index) && (!has(self.index) || self.index == oldSelf.index) && has(self.turnCalls) == has(oldSelf.turnCalls) && (!has(self.turnCalls) || self.turnCalls == oldSelf.turnCalls) && self.tool == oldSelf.tool && self.input == oldSelf.input && has(self.reason) == has(oldSelf.reason) && (!has(self.reason) || self.reason == oldSelf.reason) && self.requestedBy == oldSelf.requestedBy && has(self.requestedByGroups) == has(oldSelf.requestedByGroups) && (!has(self.requestedByGroups) || self.requestedByGroups == oldSelf.requestedByGroups) && has(self.proposedBy) == has(oldSelf.proposedBy) && (!has(self.proposedBy) || self.proposedBy == oldSelf.proposedBy)",message="spec is immutable: a ToolIntent records one proposal; create a new ToolIntent instead (only spec.cancel may be set, to withdraw the call)"
// +kubebuilder:validation:XValidation:rule="!(has(oldSelf.cancel) && oldSelf.cancel) || (has(self.cancel) && self.cancel)",message="spec.cancel cannot be set back to false: a cancelled call stays cancelled; propose the call again as a new ToolIntent"
// +kubebuilder:validation:XValidation:rule="!has(self.turnCalls) || self.index < self.turnCalls",message="index must be less than turnCalls: turnCalls counts the turn's calls, numbered from 0"
type ToolIntentSpec struct {
	// taskRef names the AgentTask this intent belongs to.
	// +required
	TaskRef LocalObjectReference `json:"taskRef"`
	// turn of the task in which the call was proposed, starting at 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Turn int32 `json:"turn"`
	// index of the call within its turn, starting at 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// turnCalls is how many calls the turn has, when the proposer knows it (the agent
	// loop always does). No call of the turn runs before all of them exist and are
	// decided, so a Redirect or Stop of a later call still keeps an earlier one from
	// running. Without it, a turn is the intents that exist.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	TurnCalls int32 `json:"turnCalls,omitempty"`
	// tool to call, for example bash or read_file.
	// +required
	Tool ToolName `json:"tool"`
	// input is the tool's arguments as proposed: untrusted JSON, validated against the
	// tool's schema before anything else happens.
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Input runtime.RawExtension `json:"input"`
	// reason is the proposer's explanation, shown to humans. It is never used to decide.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Reason string `json:"reason,omitempty"`
	// requestedBy is the Kubernetes user that created the intent. The admission policy
	// requires it to be the caller, so the requester on every Approval is true, and
	// the task's proposers are checked against it (an intent from anyone else fails
	// validation).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	RequestedBy string `json:"requestedBy"`
	// requestedByGroups are groups of the creator that it proposes as, to be let in
	// by a task whose agent.external.proposers.groups name one of them. The admission
	// policy requires each to be one of the creator's own groups.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	RequestedByGroups []string `json:"requestedByGroups,omitempty"`
	// proposedBy records the model or agent that proposed the call.
	// +optional
	ProposedBy ProposedBy `json:"proposedBy,omitempty"`
	// cancel, set by the proposer, withdraws the call; default false. A call that
	// has not started running ends without running: its observation is Aborted, not
	// executed, and says that nothing ran and who cancelled it (spec.requestedBy,
	// or "its proposer"); an Approval it waits on is retired and never used. A call
	// that is running is aborted as a task's spec.lifecycle Cancelled aborts it (its Job is
	// deleted): its observation is Aborted, executed, and says the workspace may be
	// partly changed. A call that was already observed does not change. Once true it
	// stays true. It is the one field of spec that may change after creation, and
	// only the intent's requester (or the controller) may set it (admission policy
	// toolintent-cancel.toolgate.dev). The approval fingerprint does not cover it.
	// +optional
	Cancel bool `json:"cancel,omitempty"`
}

// JudgeResult is a judge's verdict on one rule's condition.
// +kubebuilder:validation:Enum=Match;NoMatch;Unknown
type JudgeResult string

const (
	JudgeMatchResult   JudgeResult = "Match"
	JudgeNoMatchResult JudgeResult = "NoMatch"
	// JudgeUnknown: the judge could not say, or its answer was not used (a timeout,
	// an error, an answer that fails the schema); error says which.
	JudgeUnknown JudgeResult = "Unknown"
)

// JudgeVerdict is the judge model's verdict on one rule for one call.
type JudgeVerdict struct {
	// policyRuleRef names the rule whose condition the judge evaluated.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.kind != 'ModeDefault'",message="a judge verdict is on a policy's rule: policyRuleRef.kind is ToolPolicy or ClusterToolPolicy"
	PolicyRuleRef PolicyRuleReference `json:"policyRuleRef"`
	// result: Match, NoMatch or Unknown.
	// +required
	Result JudgeResult `json:"result"`
	// confidencePercent the judge gave, 0 to 100.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ConfidencePercent *int32 `json:"confidencePercent,omitempty"`
	// error says why the result is unknown, when it is not the judge's own answer.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Error string `json:"error,omitempty"`
	// latencyMillis is how long the judge's request took.
	// +optional
	LatencyMillis int64 `json:"latencyMillis,omitempty"`
}

// CommandPart is one part of a (possibly compound) command and its category.
type CommandPart struct {
	// command is the part's argv joined with spaces, or a description such as
	// "redirect > out.txt".
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Command string `json:"command"`
	// category of the part.
	// +required
	Category CommandCategory `json:"category"`
	// reason says why the part is not read-only when the command alone does not
	// show it, for example "unknown option --compress-program".
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Reason string `json:"reason,omitempty"`
}

// RuleHit is a rule that matched but did not act: an Audit rule, a DryRun rule, or a
// rule whose decision was overridden by a stricter one.
type RuleHit struct {
	// policyRuleRef names the rule that matched, at its policy's generation.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.kind != 'ModeDefault'",message="a rule hit is a policy's rule: policyRuleRef.kind is ToolPolicy or ClusterToolPolicy"
	PolicyRuleRef PolicyRuleReference `json:"policyRuleRef"`
	// action the rule would have taken: Allow, Ask, Deny, Audit, Redirect or Stop.
	// +required
	Action RuleAction `json:"action"`
	// enforcement of the rule: Enforce or DryRun.
	// +optional
	Enforcement Enforcement `json:"enforcement,omitempty"`
	// limited says why a rule that would have acted did not: its maxFires were used
	// or it was cooling down.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Limited string `json:"limited,omitempty"`
}

// Decision is the policy engine's verdict and everything needed to explain it.
type Decision struct {
	// action is Allow, Ask, Deny, Redirect or Stop.
	// +required
	Action DecisionAction `json:"action"`
	// instruction is the deciding Redirect rule's registered instruction.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Instruction string `json:"instruction,omitempty"`
	// policyRuleRef names what decided: a policy's rule at the policy's
	// generation, or, when no enforcing rule matched, the task's mode (kind
	// ModeDefault).
	// +required
	PolicyRuleRef PolicyRuleReference `json:"policyRuleRef"`
	// reason in words a person can check.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Reason string `json:"reason,omitempty"`
	// risk of the call.
	// +optional
	Risk Risk `json:"risk,omitempty"`
	// category is the strictest category of the call.
	// +optional
	Category CommandCategory `json:"category,omitempty"`
	// parts lists every part of the call with its category.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Parts []CommandPart `json:"parts,omitempty"`
	// nonActingHits are rules that matched without deciding: Audit and DryRun rules
	// and rules overridden by a stricter one.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	NonActingHits []RuleHit `json:"nonActingHits,omitempty"`
	// judgeVerdicts are the judge model's verdicts on the DryRun rules with a
	// match.judge condition whose other conditions matched: recorded, never acted on.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	JudgeVerdicts []JudgeVerdict `json:"judgeVerdicts,omitempty"`
	// approvers of the deciding rule, for Ask.
	// +optional
	Approvers Approvers `json:"approvers,omitempty"`
	// walls restrict the sandbox the call runs in beyond the task's: set when the
	// call is read-only (read-only workspace, no network) or the task's mode is
	// ReadOnly (read-only workspace).
	// +optional
	Walls *SandboxWalls `json:"walls,omitempty"`
	// sandbox is where and how the call runs, fixed when it was decided: the
	// task's UID and its sandbox resolved with the walls. The Execution is built
	// from it alone, so a task changed or re-created after the decision cannot
	// move an allowed or approved call elsewhere. Absent on decisions recorded
	// before it existed; such a call does not run (it ends with nothing executed).
	// +optional
	Sandbox *DecidedSandbox `json:"sandbox,omitempty"`
	// fingerprint is the SHA-256 over the canonical JSON of task, tool, normalized
	// input, rule, policy generation, walls and sandbox; an Approval is bound to it.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Fingerprint string `json:"fingerprint,omitempty"`
	// grants are the deciding Ask rule's grants (what an approver may extend its
	// Approval to), as the rule said when it decided.
	// +optional
	Grants *RuleGrants `json:"grants,omitempty"`
	// grantRef names the ApprovalGrant that allowed this asked call without a new
	// Approval, and which of its uses it took.
	// +optional
	GrantRef *GrantReference `json:"grantRef,omitempty"`
}

// GrantReference is one use of an ApprovalGrant.
type GrantReference struct {
	// name of the ApprovalGrant.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// approvalName is the Approval the grant extends.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ApprovalName string `json:"approvalName"`
	// grantedBy is the approver who granted it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	GrantedBy string `json:"grantedBy"`
	// scope of the grant.
	// +required
	Scope GrantScope `json:"scope"`
	// use is which use this call took (1 for the first).
	// +required
	Use int32 `json:"use"`
	// of is the grant's maxUses.
	// +required
	Of int32 `json:"of"`
}

// String is how trace and events show the use: "grant G from alice's Approval X,
// use 3 of 10".
func (g GrantReference) String() string {
	return fmt.Sprintf("grant %s (%s) from %s's Approval %s, use %d of %d", g.Name, g.Scope, g.GrantedBy, g.ApprovalName, g.Use, g.Of)
}

// DecidedSandbox is the sandbox a decided call runs in, resolved from its task at
// decide time and covered by the decision's fingerprint.
type DecidedSandbox struct {
	// taskUID is the UID of the AgentTask the call was decided for: a task deleted
	// and created again under the same name is another task, and the call does not
	// run in it.
	// +required
	// +kubebuilder:validation:MaxLength=128
	TaskUID string `json:"taskUID"`
	// profile is the task's sandbox with the walls applied: image, runtimeClass,
	// network and egress, workspace claim and mount mode, resources.
	// +required
	Profile SandboxProfile `json:"profile"`
	// timeoutSeconds after which the call is killed.
	// +required
	TimeoutSeconds int32 `json:"timeoutSeconds"`
	// maxOutputBytes caps the combined output the call's status shows (see
	// Execution spec.maxOutputBytes).
	// +required
	// +kubebuilder:validation:Maximum=262144
	MaxOutputBytes int32 `json:"maxOutputBytes"`
	// workdir is the working directory, relative to the workspace root.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Workdir string `json:"workdir,omitempty"`
	// env is set for the tool.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []EnvVar `json:"env,omitempty"`
}

// Validation is the result of validating an intent.
type Validation struct {
	// errors lists every validation error with its JSON path: at most 64, each at
	// most 1024 bytes (longer ones are cut, and a last error says how many more
	// there were).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	Errors []string `json:"errors,omitempty"`
	// timeoutSeconds is the effective timeout after defaulting and clamping.
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// timeoutClamped is true when the requested timeout exceeded the task's maximum.
	// +optional
	TimeoutClamped bool `json:"timeoutClamped,omitempty"`
	// baselineSHA256 is the content hash from the earlier read_file that an edit is
	// checked against.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	BaselineSHA256 string `json:"baselineSHA256,omitempty"`
	// baselineIntentName names the ToolIntent (a read_file, write_file or
	// edit_file) the baseline came from.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BaselineIntentName string `json:"baselineIntentName,omitempty"`
}

// Observation is what the model sees about the call next turn: facts only.
type Observation struct {
	// outcome of the call.
	// +required
	Outcome Outcome `json:"outcome"`
	// executed says whether anything ran. False for validation failures, denials and
	// expired or denied approvals.
	// +required
	Executed bool `json:"executed"`
	// summary is the text the model sees: the [exit code: N] marker, the head and tail
	// of the output within the task's cap and an explicit notice of anything cut.
	// Secrets are masked, and the summary is cut in the middle after masking so that
	// it takes at most 1 MiB as stored (MaxOutputTextBytes).
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Summary string `json:"summary,omitempty"`
	// exitCode of the tool, when it ran to an exit.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// truncated is true when the summary does not hold the whole output.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// artifact says where the full output is (the Job's log and the workspace copy).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Artifact string `json:"artifact,omitempty"`
	// instruction is the registered instruction of the Redirect rule that redirected
	// the turn, on the redirected call's observation; the agent loop gives it to the
	// model after all the turn's tool results, once per rule.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Instruction string `json:"instruction,omitempty"`
	// contentSHA256 is the file's content hash after a successful read_file, write_file
	// or edit_file; a later edit of the same path is checked against it.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ContentSHA256 string `json:"contentSHA256,omitempty"`
	// observedAt is when the observation was written.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`
	// maskedSecrets says what secret masking found in the call's output (from its
	// Execution): "2 secrets redacted (aws-access-token, private-key)".
	// +optional
	MaskedSecrets *MaskedSecrets `json:"maskedSecrets,omitempty"`
	// resultCheck says which result rules (when: Result) matched the call's output
	// and what they did to what the model sees. Absent when no result rule matched
	// (or the call did not run).
	// +optional
	ResultCheck *ResultCheck `json:"resultCheck,omitempty"`
}

// ResultCheck is what the result rules did with one executed call's output. The
// Execution keeps what ran and printed; the observation's summary is what the model
// sees after these rules.
type ResultCheck struct {
	// action is what decided the result: Allow (the output goes to the model, with
	// any redactions), Redact, Replace (the model gets the instruction instead),
	// Ask (a human releases it) or Stop (the task ends).
	// +required
	Action RuleAction `json:"action"`
	// policyRuleRef names the rule that decided, at its policy's generation; absent
	// when no acting rule matched.
	// +optional
	PolicyRuleRef *PolicyRuleReference `json:"policyRuleRef,omitempty"`
	// reason of the deciding rule, in words a person can check.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Reason string `json:"reason,omitempty"`
	// effects say, one line each, what the acting rules did: "output replaced by
	// rule ToolPolicy/p/r", "2 matches redacted by rule ToolPolicy/p/r".
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	Effects []string `json:"effects,omitempty"`
	// redactions is how many matches the Redact rules replaced in the summary.
	// +optional
	Redactions int32 `json:"redactions,omitempty"`
	// nonActingHits are result rules that matched without acting: Audit and DryRun
	// rules (with the action they would have taken), rules below the one that
	// decided, and rules past their maxFires.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	NonActingHits []RuleHit `json:"nonActingHits,omitempty"`
}

// ToolIntentStatus records the pipeline's steps for the intent.
type ToolIntentStatus struct {
	// conditions: Validated, Decided, Approved (when asked), Executed, Observed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// validation is the result of validating the input.
	// +optional
	Validation *Validation `json:"validation,omitempty"`
	// decision of the policy engine that is in force: the one the call runs on.
	// +optional
	Decision *Decision `json:"decision,omitempty"`
	// supersededDecisions are earlier decisions of this intent, oldest first, each
	// replaced when the call was decided again just before it would have run and
	// the policies in force then were stricter (an Ask from another rule, or an Ask
	// where Allow was recorded): the call asks again under the new decision.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	SupersededDecisions []Decision `json:"supersededDecisions,omitempty"`
	// approvalName names the Approval created for an Ask decision.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ApprovalName string `json:"approvalName,omitempty"`
	// executionName names the Execution that ran the call.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ExecutionName string `json:"executionName,omitempty"`
	// observation is what the model sees next turn.
	// +optional
	Observation *Observation `json:"observation,omitempty"`
}

// ToolIntent is one tool call proposed by an agent, governed by toolgate.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=intent;intents,categories=toolgate
// +kubebuilder:printcolumn:name="Task",type=string,JSONPath=`.spec.taskRef.name`
// +kubebuilder:printcolumn:name="Turn",type=integer,JSONPath=`.spec.turn`
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.tool`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.status.decision.action`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.status.observation.outcome`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Risk",type=string,JSONPath=`.status.decision.risk`,priority=1
// +kubebuilder:printcolumn:name="Decided-By",type=string,JSONPath=`.status.decision.policyRuleRef.kind`,priority=1,description="What decided: ToolPolicy, ClusterToolPolicy, or ModeDefault (no rule matched; the task's mode decided)"
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.status.decision.policyRuleRef.name`,priority=1,description="The policy that decided, or the task's mode for ModeDefault"
// +kubebuilder:printcolumn:name="Rule",type=string,JSONPath=`.status.decision.policyRuleRef.rule`,priority=1
// +kubebuilder:printcolumn:name="Requester",type=string,JSONPath=`.spec.requestedBy`,priority=1
// +kubebuilder:printcolumn:name="Exit",type=integer,JSONPath=`.status.observation.exitCode`,priority=1
type ToolIntent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the proposal; immutable but for spec.cancel.
	// +required
	Spec ToolIntentSpec `json:"spec"`
	// status is written by the controller only.
	// +optional
	Status ToolIntentStatus `json:"status,omitempty"`
}

// ToolIntentList is a list of ToolIntents.
// +kubebuilder:object:root=true
type ToolIntentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ToolIntent `json:"items"`
}

func init() {
	register(&ToolIntent{}, &ToolIntentList{})
}
