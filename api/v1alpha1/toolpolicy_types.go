package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RuleAction is what a matching rule does. The strictest matching rule decides:
// Stop > Deny > Ask > Redirect > Allow for calls, Stop > Ask > Replace > Redact for
// results.
// +kubebuilder:validation:Enum=Allow;Ask;Deny;Audit;Redirect;Stop;Redact;Replace
type RuleAction string

const (
	RuleAllow RuleAction = "Allow"
	RuleAsk   RuleAction = "Ask"
	RuleDeny  RuleAction = "Deny"
	// RuleAudit records that the rule matched and never changes the decision.
	RuleAudit RuleAction = "Audit"
	// RuleRedirect runs nothing of the turn and gives the model the rule's
	// registered instruction (a completion rule: the answer is not accepted yet).
	RuleRedirect RuleAction = "Redirect"
	// RuleStop runs nothing of the turn and ends the task Failed (PolicyStopped).
	RuleStop RuleAction = "Stop"
	// RuleRedact (result rules only) replaces what the rule's redact patterns or
	// the secret detector matched in the output before the model sees it.
	RuleRedact RuleAction = "Redact"
	// RuleReplace (result rules only) withholds the output from the model, which
	// gets the rule's registered instruction instead.
	RuleReplace RuleAction = "Replace"
)

// RuleEvent is when a rule is evaluated.
// +kubebuilder:validation:Enum=ToolCall;Completion;Result
type RuleEvent string

const (
	// WhenToolCall: the rule decides tool calls (the default).
	WhenToolCall RuleEvent = "ToolCall"
	// WhenCompletion: the rule checks a model task's final answer before it is
	// accepted, with match.cel over the task's recorded history.
	WhenCompletion RuleEvent = "Completion"
	// WhenResult: the rule checks what an executed call returned before the model
	// sees it, with match.tools and match.cel over the call and its result.
	WhenResult RuleEvent = "Result"
)

// RedactSpec says what a Redact rule replaces in a call's output.
// +kubebuilder:validation:XValidation:rule="(has(self.patterns) && size(self.patterns) > 0) || (has(self.secrets) && self.secrets)",message="redact needs something to redact: patterns, secrets: true, or both"
type RedactSpec struct {
	// patterns are RE2 regular expressions (Go's regexp syntax). A pattern without
	// capture groups replaces its whole match; one with groups replaces what each
	// group matched, so `(?m)^\s+[\w.-]+:\s+(\S+)$` keeps the keys of a YAML map
	// and redacts the values. A pattern that does not compile makes the policy not
	// Ready, with the error.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	Patterns []string `json:"patterns,omitempty"`
	// secrets runs toolgate's secret detector (the one that masks every text
	// toolgate shows) on the output as well and counts what it found.
	// +optional
	Secrets bool `json:"secrets,omitempty"`
}

// Enforcement says whether a rule acts.
// +kubebuilder:validation:Enum=Enforce;DryRun
type Enforcement string

const (
	// EnforcementEnforce: the rule acts.
	EnforcementEnforce Enforcement = "Enforce"
	// EnforcementDryRun: the rule is evaluated and recorded (shadow mode) but never acts.
	EnforcementDryRun Enforcement = "DryRun"
)

// CommandPattern matches a simple command (one part of a compound command) by the
// words its argv starts with, after wrappers such as timeout or env are unwrapped.
// For alternative words, write one pattern for each: [{prefix: [git, push]},
// {prefix: [git, reset]}].
type CommandPattern struct {
	// prefix is the words argv starts with, one argv word per item: [git, push]
	// matches `git push origin main` and `cd x && git push`, not `git status`. A word
	// has no whitespace ("git push" is two words).
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^\S+$`
	Prefix []string `json:"prefix"`
}

// RuleMatch says which calls a rule matches. Every set field must match (AND); within
// a list any element may match (OR). An empty match matches every call.
type RuleMatch struct {
	// tools the rule applies to; empty means every tool.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	Tools []ToolName `json:"tools,omitempty"`
	// categories: a Deny, Ask or Audit rule matches when any part of the call has one of
	// these; an Allow rule matches only when every part that is not ReadOnly has one of
	// these (allowing tests must not allow `go test ./... && rm -rf /`).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	Categories []CommandCategory `json:"categories,omitempty"`
	// commands are argv-prefix patterns for bash, for example [{prefix: [git, push]},
	// {prefix: [git, reset]}]. A Deny, Ask or Audit rule matches when any part of the
	// command starts with one of them; an Allow rule only when every part that is not
	// ReadOnly does.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Commands []CommandPattern `json:"commands,omitempty"`
	// paths are globs (with **) relative to the workspace for the file tools' path.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	Paths []string `json:"paths,omitempty"`
	// cel is a CEL expression that must evaluate to true for the rule to match. A
	// ToolCall rule sees `intent` (tool, input, categories, parts, argv, task, mode);
	// a Result rule sees `intent` and `result` (outcome, exitCode, output, fullOutput,
	// truncated, files); a Completion rule sees `history` (the task's calls in order, each with tool,
	// input, category, outcome, exitCode, executed) and `answer` (the final answer's
	// text).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	CEL string `json:"cel,omitempty"`
	// judge asks the cluster's judge model whether the call meets a condition in
	// words, once every other condition of the rule matched. For now a rule with a
	// judge is DryRun only: the verdict is recorded on the decision and measured,
	// and never changes what runs.
	// +optional
	Judge *JudgeMatch `json:"judge,omitempty"`
}

// JudgeMatch is a condition a judge model evaluates.
type JudgeMatch struct {
	// condition in words, for example "the command deletes files outside build/".
	// It is sent to the judge as data beside the call, never as an instruction.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Condition string `json:"condition"`
}

// RuleExamples are commands checked when the policy is loaded: a policy whose
// examples fail is not Ready and is not used.
type RuleExamples struct {
	// match lists bash commands the rule must match.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Match []string `json:"match,omitempty"`
	// notMatch lists bash commands the rule must not match.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	NotMatch []string `json:"notMatch,omitempty"`
}

// PolicyRule is one ordered rule.
// +kubebuilder:validation:XValidation:rule="!has(self.match) || !has(self.match.judge) || (has(self.enforcement) && self.enforcement == 'DryRun' && (!has(self.when) || self.when == 'ToolCall'))",message="a rule with match.judge runs in shadow for now: set enforcement: DryRun (its verdicts are recorded and measured, never acted on), on a tool-call rule"
// +kubebuilder:validation:XValidation:rule="self.action in ['Redirect', 'Replace'] ? has(self.instruction) : !has(self.instruction)",message="instruction is required for a Redirect or Replace rule and allowed only there: it is the registered text the model gets instead of the call's result"
// +kubebuilder:validation:XValidation:rule="!has(self.maxFires) && !has(self.cooldownSeconds) || self.action in ['Redirect', 'Replace']",message="maxFires and cooldownSeconds are for Redirect rules only (and Replace, among Result rules): a Deny, Ask, Stop or Redact rule that stopped acting after some fires would let the next call or secret through"
// +kubebuilder:validation:XValidation:rule="self.action == 'Redact' ? has(self.redact) : !has(self.redact)",message="redact is required for a Redact rule and allowed only there: it says what to replace in the output"
// +kubebuilder:validation:XValidation:rule="(has(self.when) && self.when == 'Result') || !(self.action in ['Redact', 'Replace'])",message="Redact and Replace act on what a call returned: set when: Result"
// +kubebuilder:validation:XValidation:rule="!has(self.when) || self.when != 'Result' || self.action in ['Redact', 'Replace', 'Ask', 'Stop', 'Audit']",message="a Result rule's action is Redact, Replace, Ask, Stop or Audit: the call has run already, so Allow, Deny and Redirect mean nothing for its result"
// +kubebuilder:validation:XValidation:rule="!has(self.when) || self.when != 'Result' || ((!has(self.match) || (!has(self.match.categories) && !has(self.match.commands) && !has(self.match.paths))) && (!has(self.examples) || (!has(self.examples.match) && !has(self.examples.notMatch))) && !has(self.grants))",message="a Result rule matches with match.tools and match.cel (which sees the call as a tool-call rule does, and its result); categories, commands, paths and examples are for tool-call rules, grants for tool-call Ask rules"
// +kubebuilder:validation:XValidation:rule="!has(self.when) || self.when != 'Completion' || self.action in ['Redirect', 'Deny', 'Audit']",message="a Completion rule's action is Redirect (the model goes on with the instruction), Deny (the task fails) or Audit"
// +kubebuilder:validation:XValidation:rule="!has(self.when) || self.when != 'Completion' || ((!has(self.match) || (!has(self.match.tools) && !has(self.match.categories) && !has(self.match.paths))) && (!has(self.examples) || (!has(self.examples.match) && !has(self.examples.notMatch))))",message="a Completion rule matches with match.cel over the task's history only: tools, categories and paths describe a tool call, and examples are bash commands"
// +kubebuilder:validation:XValidation:rule="!has(self.grants) || self.action == 'Ask'",message="grants are for Ask rules only: they extend an approval, and only an Ask rule asks for one"
// +kubebuilder:validation:XValidation:rule="!has(self.grants) || !has(self.grants.allowedScopes) || !('CommandPrefix' in self.grants.allowedScopes) || (has(self.match.tools) && self.match.tools == ['bash'])",message="grants.allowedScopes may hold CommandPrefix only on a rule whose match.tools is [bash]: a command prefix means nothing to another tool"
type PolicyRule struct {
	// name of the rule, unique in the policy; it is recorded in every decision.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// action when the rule matches: Allow, Ask, Deny, Redirect, Stop or Audit
	// (record only); a Result rule's is Redact, Replace, Ask, Stop or Audit.
	// +required
	Action RuleAction `json:"action"`
	// when the rule is evaluated: ToolCall (default), for each proposed call,
	// Completion, for a model task's final answer before it is accepted, or Result,
	// for what an executed call returned before the model sees it. (Not "on":
	// YAML 1.1, which kubectl reads manifests with, turns an unquoted on key into
	// true, and the rule would silently become a tool-call rule.)
	// +optional
	When RuleEvent `json:"when,omitempty"`
	// instruction is the fixed text a Redirect rule gives the model, after every tool
	// result of the turn, instead of running the call (a Replace rule: instead of
	// the call's output): registered here, never generated.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Instruction string `json:"instruction,omitempty"`
	// maxFires is how often the rule acts in one task; once it has, it only records
	// that it matched (a hit with limited set) and the other rules decide. Counted
	// from the task's recorded decisions (and, for Completion rules, its recorded
	// completion checks), so restarts do not reset it. Completion rules default to 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxFires *int32 `json:"maxFires,omitempty"`
	// cooldownSeconds is how long after it acted in a task the rule only records that
	// it matched.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=604800
	CooldownSeconds *int32 `json:"cooldownSeconds,omitempty"`
	// enforcement is Enforce (default) or DryRun (evaluated and recorded, never acts).
	// +optional
	// +kubebuilder:default=Enforce
	Enforcement Enforcement `json:"enforcement,omitempty"`
	// match selects the calls the rule applies to.
	// +optional
	Match RuleMatch `json:"match,omitempty"`
	// reason shown to the model and to people when the rule decides.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Reason string `json:"reason,omitempty"`
	// risk of the calls this rule matches.
	// +optional
	Risk Risk `json:"risk,omitempty"`
	// approvers who may decide an Approval this rule asks for.
	// +optional
	Approvers Approvers `json:"approvers,omitempty"`
	// examples checked when the policy is loaded.
	// +optional
	Examples RuleExamples `json:"examples,omitempty"`
	// grants says how far an approver may extend an Approval this rule asks for
	// (an ApprovalGrant): the scopes allowed (default Once only), and the bounds of
	// a grant's uses and lifetime. Only on Ask rules.
	// +optional
	Grants *RuleGrants `json:"grants,omitempty"`
	// redact says what a Redact rule replaces in the output: patterns, the secret
	// detector, or both. Only on Redact rules.
	// +optional
	Redact *RedactSpec `json:"redact,omitempty"`
}

// ToolPolicySpec holds the ordered rules of a policy.
type ToolPolicySpec struct {
	// rules in order; the strictest matching rule decides
	// (Stop > Deny > Ask > Redirect > Allow).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Rules []PolicyRule `json:"rules,omitempty"`
}

// ToolPolicyStatus says whether the policy is used.
type ToolPolicyStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// rules is the number of rules compiled.
	// +optional
	Rules int32 `json:"rules,omitempty"`
}

// ToolPolicy governs the tool calls of tasks in its namespace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tp,categories=toolgate
// +kubebuilder:printcolumn:name="Rules",type=integer,JSONPath=`.status.rules`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="The Ready condition's reason: why a policy is not used for decisions"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Observed",type=integer,JSONPath=`.status.observedGeneration`,priority=1,description="The generation the status describes; behind metadata.generation until the controller compiled the last edit"
type ToolPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the rules.
	// +required
	Spec ToolPolicySpec `json:"spec"`
	// status says whether the policy is used.
	// +optional
	Status ToolPolicyStatus `json:"status,omitempty"`
}

// ToolPolicyList is a list of ToolPolicies.
// +kubebuilder:object:root=true
type ToolPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ToolPolicy `json:"items"`
}

// ClusterToolPolicy governs the tool calls of every task in the cluster. Its Deny
// wins over every namespaced policy.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ctp,categories=toolgate
// +kubebuilder:printcolumn:name="Rules",type=integer,JSONPath=`.status.rules`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="The Ready condition's reason: why a policy is not used for decisions"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Observed",type=integer,JSONPath=`.status.observedGeneration`,priority=1,description="The generation the status describes; behind metadata.generation until the controller compiled the last edit"
type ClusterToolPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the rules.
	// +required
	Spec ToolPolicySpec `json:"spec"`
	// status says whether the policy is used.
	// +optional
	Status ToolPolicyStatus `json:"status,omitempty"`
}

// ClusterToolPolicyList is a list of ClusterToolPolicies.
// +kubebuilder:object:root=true
type ClusterToolPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterToolPolicy `json:"items"`
}

func init() {
	register(&ToolPolicy{}, &ToolPolicyList{}, &ClusterToolPolicy{}, &ClusterToolPolicyList{})
}
