package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

// testNS is the namespace every built object lives in.
const testNS = "team-a"

// testTask is the task name every intent builder points at unless told otherwise.
const testTask = "t"

// epoch is the fixed clock the tests inject.
var epoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// intentBuilder builds a ToolIntent: makeIntent("t-t0-0").tool("bash").input(`{...}`).turn(0).obj().
type intentBuilder struct{ in v1.ToolIntent }

func makeIntent(name string) *intentBuilder {
	return &intentBuilder{in: v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: v1.ToolIntentSpec{
			TaskRef:     v1.LocalObjectReference{Name: testTask},
			Tool:        v1.ToolReadFile,
			Input:       runtime.RawExtension{Raw: []byte(`{"path":"README.md"}`)},
			RequestedBy: "agent",
		},
	}}
}

func (b *intentBuilder) tool(t v1.ToolName) *intentBuilder { b.in.Spec.Tool = t; return b }
func (b *intentBuilder) input(raw string) *intentBuilder {
	b.in.Spec.Input = runtime.RawExtension{Raw: []byte(raw)}
	return b
}
func (b *intentBuilder) task(name string) *intentBuilder {
	b.in.Spec.TaskRef.Name = name
	return b
}
func (b *intentBuilder) turn(n int32) *intentBuilder  { b.in.Spec.Turn = n; return b }
func (b *intentBuilder) cancel() *intentBuilder       { b.in.Spec.Cancel = true; return b }
func (b *intentBuilder) index(n int32) *intentBuilder { b.in.Spec.Index = n; return b }
func (b *intentBuilder) reason(r string) *intentBuilder {
	b.in.Spec.Reason = r
	return b
}
func (b *intentBuilder) requestedBy(who string) *intentBuilder {
	b.in.Spec.RequestedBy = who
	return b
}
func (b *intentBuilder) requestedByGroups(groups ...string) *intentBuilder {
	b.in.Spec.RequestedByGroups = groups
	return b
}

// ownedBy makes the task the intent's controller owner, as the agent loop creates a
// model task's intents.
func (b *intentBuilder) ownedBy(task *v1.AgentTask) *intentBuilder {
	b.in.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(task, v1.GroupVersion.WithKind("AgentTask"))}
	return b
}
func (b *intentBuilder) created(t time.Time) *intentBuilder {
	b.in.CreationTimestamp = metav1.NewTime(t)
	return b
}

// decided records a policy decision with that action.
func (b *intentBuilder) decided(a v1.DecisionAction) *intentBuilder {
	b.in.Status.Decision = &v1.Decision{Action: a, Fingerprint: "fp-" + b.in.Name}
	return b
}

// decidedByPolicy records the decision policy.Decide makes for the intent in a task
// of that mode with no policies: its action, category and walls, as the controller
// records it (the fingerprint stays the builders' stand-in).
func (b *intentBuilder) decidedByPolicy(mode v1.TaskMode) *intentBuilder {
	d := policy.Decide(policy.Request{
		Namespace: b.in.Namespace, Task: b.in.Spec.TaskRef.Name, Mode: mode,
		Tool: b.in.Spec.Tool, Input: b.in.Spec.Input.Raw,
	}, nil, nil, nil)
	d.Fingerprint = "fp-" + b.in.Name
	b.in.Status.Decision = &d
	return b
}

// category records the decision's category, as an older controller did, without walls.
func (b *intentBuilder) category(c v1.CommandCategory) *intentBuilder {
	b.in.Status.Decision.Category = c
	return b
}

// validated records a passed validation with that timeout.
func (b *intentBuilder) validated(timeoutSeconds int32, baselineSHA string) *intentBuilder {
	b.in.Status.Validation = &v1.Validation{TimeoutSeconds: timeoutSeconds, BaselineSHA256: baselineSHA}
	return b
}

// approved marks the intent's Approved condition True, as the reconciler does once a
// human approved it.
func (b *intentBuilder) approved() *intentBuilder {
	b.in.Status.Conditions = append(b.in.Status.Conditions, metav1.Condition{
		Type: v1.ConditionApproved, Status: metav1.ConditionTrue, Reason: v1.ReasonApprovalGranted,
	})
	b.in.Status.ApprovalName = b.in.Name
	return b
}

func (b *intentBuilder) executing() *intentBuilder {
	b.in.Status.ExecutionName = b.in.Name
	return b
}

// observed records an observation with that outcome.
func (b *intentBuilder) observed(o v1.Outcome) *intentBuilder {
	b.in.Status.Observation = &v1.Observation{Outcome: o}
	return b
}

func (b *intentBuilder) obj() *v1.ToolIntent { return b.in.DeepCopy() }
func (b *intentBuilder) val() v1.ToolIntent  { return *b.in.DeepCopy() }

// taskBuilder builds an AgentTask: makeTask("t").mode(v1.ModeEdit).obj().
type taskBuilder struct{ t v1.AgentTask }

func makeTask(name string) *taskBuilder {
	return &taskBuilder{t: v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Generation: 1},
		Spec: v1.AgentTaskSpec{
			Goal: "make the tests pass",
			Mode: v1.ModeEdit,
		},
	}}
}

func (b *taskBuilder) mode(m v1.TaskMode) *taskBuilder { b.t.Spec.Mode = m; return b }
func (b *taskBuilder) tools(names ...v1.ToolName) *taskBuilder {
	b.t.Spec.Tools = names
	return b
}
func (b *taskBuilder) budgets(bu v1.Budgets) *taskBuilder { b.t.Spec.Budgets = bu; return b }

// external makes the task's agent external, with the builders' default requester
// ("agent") as its one proposer.
func (b *taskBuilder) external() *taskBuilder {
	b.t.Spec.Agent.External = &v1.ExternalAgent{Proposers: v1.Proposers{Users: []string{"agent"}}}
	return b
}
func (b *taskBuilder) proposers(p v1.Proposers) *taskBuilder {
	b.t.Spec.Agent.External = &v1.ExternalAgent{Proposers: p}
	return b
}
func (b *taskBuilder) model() *taskBuilder {
	b.t.Spec.Agent.Model = &v1.ModelAgent{BaseURL: "http://model.example/v1", Model: "m"}
	return b
}
func (b *taskBuilder) uid(u types.UID) *taskBuilder { b.t.UID = u; return b }
func (b *taskBuilder) done() *taskBuilder           { b.t.Spec.Lifecycle = v1.LifecycleDone; return b }
func (b *taskBuilder) cancel() *taskBuilder         { b.t.Spec.Lifecycle = v1.LifecycleCancelled; return b }
func (b *taskBuilder) existingClaim(name string) *taskBuilder {
	b.t.Spec.Workspace.ExistingClaim = name
	return b
}
func (b *taskBuilder) sandbox(s v1.SandboxSpec) *taskBuilder { b.t.Spec.Sandbox = s; return b }
func (b *taskBuilder) tokensUsed(n int64) *taskBuilder {
	b.t.Status.TokensUsed = n
	return b
}

// condition sets a status condition as an earlier reconcile left it.
func (b *taskBuilder) condition(typ string, status metav1.ConditionStatus, reason string, at time.Time) *taskBuilder {
	b.t.Status.Conditions = append(b.t.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: "earlier: " + reason,
		ObservedGeneration: b.t.Generation, LastTransitionTime: metav1.NewTime(at),
	})
	return b
}

func (b *taskBuilder) obj() *v1.AgentTask { return b.t.DeepCopy() }

// executionBuilder builds a finished Execution: makeExecution("x").failed(v1.ErrorTimeout).obj().
type executionBuilder struct{ e v1.Execution }

func makeExecution(name string) *executionBuilder {
	return &executionBuilder{e: v1.Execution{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec:       v1.ExecutionSpec{Tool: v1.ToolBash, TimeoutSeconds: 30},
	}}
}

func (b *executionBuilder) succeeded() *executionBuilder {
	b.e.Status.Phase = v1.ExecutionSucceeded
	return b
}
func (b *executionBuilder) failed(kind v1.ErrorKind, msg string) *executionBuilder {
	b.e.Status.Phase = v1.ExecutionFailed
	b.e.Status.ErrorKind = kind
	b.e.Status.Message = msg
	return b
}
func (b *executionBuilder) exitCode(c int32) *executionBuilder {
	b.e.Status.ExitCode = &c
	return b
}
func (b *executionBuilder) output(s string) *executionBuilder { b.e.Status.Output = s; return b }
func (b *executionBuilder) truncated(stdout, stderr int64) *executionBuilder {
	b.e.Status.Truncated = true
	b.e.Status.StdoutBytes = stdout
	b.e.Status.StderrBytes = stderr
	return b
}
func (b *executionBuilder) artifactPath(p string) *executionBuilder {
	b.e.Status.ArtifactPath = p
	return b
}
func (b *executionBuilder) podName(p string) *executionBuilder { b.e.Status.PodName = p; return b }
func (b *executionBuilder) contentSHA(s string) *executionBuilder {
	b.e.Status.Facts = &v1.ToolFacts{ContentSHA256: s}
	return b
}

// whole makes the status hold the runner's trusted result and all of its output, as
// executor.Project records one read whole from the pod's log.
func (b *executionBuilder) whole(job string) *executionBuilder {
	sum := sha256.Sum256([]byte(b.e.Status.Output))
	b.e.Status.JobName = job
	b.e.Status.OutputSHA256 = hex.EncodeToString(sum[:])
	b.e.Status.StdoutBytes = int64(len(b.e.Status.Output))
	b.e.Status.Sandbox = &v1.ObservedSandbox{UID: 65532}
	b.e.Status.Conditions = []metav1.Condition{{Type: v1.ConditionComplete, Status: metav1.ConditionTrue, Reason: v1.ReasonJobSucceeded}}
	return b
}
func (b *executionBuilder) obj() *v1.Execution { return b.e.DeepCopy() }

func ptr[T any](v T) *T { return &v }
