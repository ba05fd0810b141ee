package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
)

// These tests install the generated CRDs into a real kube-apiserver and prove that the
// schema, defaults and CEL rules written as markers are what the API server enforces.

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env, nil)) }

func newTask(ns, name string) *v1.AgentTask {
	return &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.AgentTaskSpec{
			Goal:      "make the tests pass",
			Workspace: v1.WorkspaceSpec{ExistingClaim: "ws"},
			Agent:     v1.AgentSpec{External: &v1.ExternalAgent{Proposers: v1.Proposers{Users: []string{"agent"}}}},
		},
	}
}

func newIntent(ns, name string) *v1.ToolIntent {
	return &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ToolIntentSpec{
			TaskRef:     v1.LocalObjectReference{Name: "t"},
			Tool:        v1.ToolBash,
			Input:       runtime.RawExtension{Raw: []byte(`{"command":"npm test","timeoutMs":5000}`)},
			RequestedBy: "agent",
		},
	}
}

func newApproval(ns, name string) *v1.Approval {
	return &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ApprovalSpec{
			IntentRef:   v1.LocalObjectReference{Name: "i"},
			TaskRef:     v1.LocalObjectReference{Name: "t"},
			Fingerprint: strings.Repeat("ab", 32),
			Request:     v1.ApprovalRequest{Tool: v1.ToolEditFile, Input: `{"path":"a.go"}`, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, "ask-edits")},
			RequestedBy: "agent",
			ExpiresAt:   metav1.NewTime(time.Now().Add(time.Hour)),
		},
	}
}

func requireInvalid(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected the API server to refuse with %q, but it accepted", want)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("expected an Invalid error containing %q, got %v", want, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("expected error to contain %q, got: %v", want, err)
	}
}

func TestAgentTaskDefaults(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	task := newTask(ns, "defaults")
	if err := env.Client.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	got := &v1.AgentTask{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(task), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Mode != v1.ModeReadOnly {
		t.Errorf("mode default: got %q, want ReadOnly", got.Spec.Mode)
	}
	b := got.Spec.Budgets
	if b.MaxTurns != 20 || b.MaxIntents != 100 || b.MaxApprovalRequests != 10 || b.MaxConsecutiveRefusals != 5 ||
		b.DefaultTimeoutSeconds != 120 || b.MaxTimeoutSeconds != 600 || b.MaxOutputBytes != 32768 || b.ApprovalTTLSeconds != 3600 {
		t.Errorf("budget defaults not applied: %+v", b)
	}
	if got.Spec.Sandbox.Network.Mode != v1.NetworkNone {
		t.Errorf("network default: got %q, want None", got.Spec.Sandbox.Network.Mode)
	}
}

// TestAgentTaskDefaultsFromYAML creates a task the way kubectl apply of a minimal
// manifest does, with no budgets or sandbox block at all: the defaults must still apply.
func TestAgentTaskDefaultsFromYAML(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toolgate.dev/v1alpha1", "kind": "AgentTask",
		"metadata": map[string]any{"name": "minimal", "namespace": ns},
		"spec": map[string]any{
			"goal":      "x",
			"workspace": map[string]any{"existingClaim": "ws"},
			"agent":     map[string]any{"external": map[string]any{"proposers": map[string]any{"users": []any{"agent"}}}},
		},
	}}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	got := &v1.AgentTask{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minimal"}, got); err != nil {
		t.Fatal(err)
	}
	b := got.Spec.Budgets
	if b.MaxTurns != 20 || b.MaxIntents != 100 || b.MaxApprovalRequests != 10 || b.MaxConsecutiveRefusals != 5 ||
		b.DefaultTimeoutSeconds != 120 || b.MaxTimeoutSeconds != 600 || b.MaxOutputBytes != 32768 || b.ApprovalTTLSeconds != 3600 {
		t.Errorf("budget defaults not applied to a manifest without budgets: %+v", b)
	}
	if got.Spec.Sandbox.Network.Mode != v1.NetworkNone {
		t.Errorf("network default not applied to a manifest without sandbox: %q", got.Spec.Sandbox.Network.Mode)
	}
}

func TestAgentTaskValidation(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	cases := []struct {
		name   string
		mutate func(*v1.AgentTask)
		want   string
	}{
		{"unknown mode", func(a *v1.AgentTask) { a.Spec.Mode = "Yolo" }, `spec.mode: Unsupported value: "Yolo"`},
		{"two workspaces", func(a *v1.AgentTask) { a.Spec.Workspace.VolumeClaim = &v1.WorkspaceVolumeClaim{} }, "set exactly one of workspace.existingClaim or workspace.volumeClaim"},
		{"no workspace", func(a *v1.AgentTask) { a.Spec.Workspace.ExistingClaim = "" }, "set exactly one of workspace.existingClaim or workspace.volumeClaim"},
		{"git without owned claim", func(a *v1.AgentTask) { a.Spec.Workspace.Git = &v1.GitSource{URL: "https://example.com/r.git"} }, "workspace.git needs workspace.volumeClaim"},
		{"copyOf without owned claim", func(a *v1.AgentTask) {
			a.Spec.Workspace.CopyOf = &v1.WorkspaceCopy{TaskRef: v1.LocalObjectReference{Name: "fix"}}
		}, "workspace.copyOf needs workspace.volumeClaim: the other task's workspace is copied into a claim this task owns"},
		{"copyOf with git", func(a *v1.AgentTask) {
			a.Spec.Workspace = v1.WorkspaceSpec{
				VolumeClaim: &v1.WorkspaceVolumeClaim{},
				Git:         &v1.GitSource{URL: "https://example.com/r.git"},
				CopyOf:      &v1.WorkspaceCopy{TaskRef: v1.LocalObjectReference{Name: "fix"}},
			}
		}, "set at most one of workspace.git or workspace.copyOf"},
		{"copyOf naming no task", func(a *v1.AgentTask) {
			a.Spec.Workspace = v1.WorkspaceSpec{VolumeClaim: &v1.WorkspaceVolumeClaim{}, CopyOf: &v1.WorkspaceCopy{}}
		}, "spec.workspace.copyOf.taskRef.name"},
		{"two agents", func(a *v1.AgentTask) { a.Spec.Agent.Model = &v1.ModelAgent{BaseURL: "http://m", Model: "x"} }, "set exactly one of agent.model or agent.external"},
		{"egress without allow-list", func(a *v1.AgentTask) {
			a.Spec.Sandbox.Network.Egress = []v1.EgressRule{{CIDR: "10.0.0.0/8"}}
		}, "network.egress is only allowed with network.mode AllowList"},
		{"cluster DNS without allow-list", func(a *v1.AgentTask) {
			a.Spec.Sandbox.Network.ClusterDNS = true
		}, "network.clusterDNS is only allowed with network.mode AllowList"},
		{"default timeout above max", func(a *v1.AgentTask) {
			a.Spec.Budgets.DefaultTimeoutSeconds = 700
			a.Spec.Budgets.MaxTimeoutSeconds = 600
		}, "budgets.defaultTimeoutSeconds must not exceed budgets.maxTimeoutSeconds"},
		{"unknown tool name", func(a *v1.AgentTask) { a.Spec.Tools = []v1.ToolName{"Rm-Rf"} }, "spec.tools[0]"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := newTask(ns, fmt.Sprintf("bad-%d", i))
			tc.mutate(task)
			requireInvalid(t, env.Client.Create(ctx, task), tc.want)
		})
	}
}

// The task a workspace is copied from is set once: it cannot be changed, and
// copyOf cannot be added or removed, since the workspace is copied once.
func TestAgentTaskCopyOfIsImmutable(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	owned := func(name string) *v1.AgentTask {
		task := newTask(ns, name)
		task.Spec.Workspace = v1.WorkspaceSpec{VolumeClaim: &v1.WorkspaceVolumeClaim{}}
		return task
	}
	task := owned("replay")
	task.Spec.Workspace.CopyOf = &v1.WorkspaceCopy{TaskRef: v1.LocalObjectReference{Name: "fix"}}
	if err := env.Client.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	changed := task.DeepCopy()
	changed.Spec.Workspace.CopyOf.TaskRef.Name = "other"
	requireInvalid(t, env.Client.Update(ctx, changed), "spec.workspace.copyOf.taskRef is immutable: the workspace is copied from that task once")
	removed := task.DeepCopy()
	removed.Spec.Workspace.CopyOf = nil
	requireInvalid(t, env.Client.Update(ctx, removed), "spec.workspace.copyOf cannot be added or removed")

	plain := owned("plain")
	if err := env.Client.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	plain.Spec.Workspace.CopyOf = &v1.WorkspaceCopy{TaskRef: v1.LocalObjectReference{Name: "fix"}}
	requireInvalid(t, env.Client.Update(ctx, plain), "spec.workspace.copyOf cannot be added or removed")

	// The rest of the spec still changes.
	same := task.DeepCopy()
	same.Spec.Lifecycle = v1.LifecycleCancelled
	if err := env.Client.Update(ctx, same); err != nil {
		t.Fatalf("a copy task's other fields cannot change: %v", err)
	}
}

// TestAgentTaskProposers: an external task must say who may propose into it, and the
// refusal says what to write.
func TestAgentTaskProposers(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	manifest := func(name string, external map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "toolgate.dev/v1alpha1", "kind": "AgentTask",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{
				"goal":      "x",
				"workspace": map[string]any{"existingClaim": "ws"},
				"agent":     map[string]any{"external": external},
			},
		}}
	}
	many := make([]any, 33)
	for i := range many {
		many[i] = fmt.Sprintf("user-%d", i)
	}
	for _, tc := range []struct {
		name     string
		external map[string]any
		want     string
	}{
		{"no proposers block", map[string]any{"description": "an agent"}, "spec.agent.external.proposers: Required value"},
		{"an empty proposers block", map[string]any{"proposers": map[string]any{}},
			"agent.external.proposers must name at least one user, group or service account that may propose tool calls for this task, for example proposers: {users: [alice]}"},
		{"empty lists", map[string]any{"proposers": map[string]any{"users": []any{}, "groups": []any{}, "serviceAccounts": []any{}}},
			"agent.external.proposers must name at least one user, group or service account"},
		{"a service account without its namespace", map[string]any{"proposers": map[string]any{"serviceAccounts": []any{map[string]any{"name": "coding-agent"}}}},
			"spec.agent.external.proposers.serviceAccounts[0].namespace: Required value"},
		{"a service account as a user name", map[string]any{"proposers": map[string]any{"serviceAccounts": []any{map[string]any{"namespace": "team-a", "name": "system:serviceaccount:team-a:coding-agent"}}}},
			"name of a service account is lower-case letters, digits, '-' and '.'"},
		{"a service account as namespace/name", map[string]any{"proposers": map[string]any{"serviceAccounts": []any{"team-a/coding-agent"}}},
			"spec.agent.external.proposers.serviceAccounts[0]: Invalid value: \"string\": spec.agent.external.proposers.serviceAccounts[0] in body must be of type object"},
		{"too many users", map[string]any{"proposers": map[string]any{"users": many}}, "spec.agent.external.proposers.users: Too many: 33: must have at most 32 items"},
		{"an empty user name", map[string]any{"proposers": map[string]any{"users": []any{""}}}, "spec.agent.external.proposers.users[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireInvalid(t, env.Client.Create(ctx, manifest("bad", tc.external)), tc.want)
		})
	}
	for i, proposers := range []map[string]any{
		{"users": []any{"alice"}},
		{"groups": []any{"team-a"}},
		{"serviceAccounts": []any{map[string]any{"namespace": "team-a", "name": "coding-agent"}}},
		{"users": []any{"alice"}, "groups": []any{"team-a"}, "serviceAccounts": []any{map[string]any{"namespace": "ci", "name": "agent.v2"}}},
	} {
		if err := env.Client.Create(ctx, manifest(fmt.Sprintf("ok-%d", i), map[string]any{"proposers": proposers})); err != nil {
			t.Errorf("proposers %v refused: %v", proposers, err)
		}
	}
}

func TestToolIntentRequestedByGroups(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	ok := newIntent(ns, "ok")
	ok.Spec.RequestedByGroups = []string{"team-a", "sre"}
	if err := env.Client.Create(ctx, ok); err != nil {
		t.Fatalf("an intent claiming two groups was refused: %v", err)
	}
	tooMany := newIntent(ns, "too-many")
	for i := range 65 {
		tooMany.Spec.RequestedByGroups = append(tooMany.Spec.RequestedByGroups, fmt.Sprintf("g%d", i))
	}
	requireInvalid(t, env.Client.Create(ctx, tooMany), "spec.requestedByGroups: Too many: 65: must have at most 64 items")
}

func TestToolIntentSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	intent := newIntent(ns, "immutable")
	if err := env.Client.Create(ctx, intent); err != nil {
		t.Fatal(err)
	}
	// The input is free-form JSON, kept as proposed (not pruned).
	got := &v1.ToolIntent{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(intent), got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got.Spec.Input.Raw), `"timeoutMs":5000`) {
		t.Fatalf("input was not preserved: %s", got.Spec.Input.Raw)
	}
	got.Spec.Input = runtime.RawExtension{Raw: []byte(`{"command":"rm -rf /"}`)}
	requireInvalid(t, env.Client.Update(ctx, got), "spec is immutable: a ToolIntent records one proposal")

	// The status subresource can still be written.
	got = &v1.ToolIntent{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(intent), got); err != nil {
		t.Fatal(err)
	}
	got.Status.Decision = &v1.Decision{Action: v1.DecisionAllow, PolicyRuleRef: v1.ModeDefaultReference(v1.ModeEdit)}
	if err := env.Client.Status().Update(ctx, got); err != nil {
		t.Fatalf("status update refused: %v", err)
	}
}

// spec.cancel is the one field of a ToolIntent's spec that may change, and only from
// false to true; setting it does not open the others.
func TestToolIntentCancelOnlyGoesOn(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	intent := newIntent(ns, "cancel")
	intent.Spec.Reason = "run the tests"
	if err := env.Client.Create(ctx, intent); err != nil {
		t.Fatal(err)
	}
	get := func() *v1.ToolIntent {
		got := &v1.ToolIntent{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(intent), got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	// Cancelling with another change is refused as a change of the proposal.
	sneaky := get()
	sneaky.Spec.Cancel = true
	sneaky.Spec.Reason = "something else"
	requireInvalid(t, env.Client.Update(ctx, sneaky), "spec is immutable: a ToolIntent records one proposal")
	sneaky = get()
	sneaky.Spec.Cancel = true
	sneaky.Spec.RequestedByGroups = []string{"admins"}
	requireInvalid(t, env.Client.Update(ctx, sneaky), "spec is immutable: a ToolIntent records one proposal")

	cancelled := get()
	cancelled.Spec.Cancel = true
	if err := env.Client.Update(ctx, cancelled); err != nil {
		t.Fatalf("setting spec.cancel refused: %v", err)
	}
	if got := get(); !got.Spec.Cancel || got.Spec.Reason != "run the tests" {
		t.Fatalf("after the cancel: %+v", got.Spec)
	}

	// Once true it stays true: by an update (false is left out of the JSON) and by a
	// merge patch that says false.
	back := get()
	back.Spec.Cancel = false
	requireInvalid(t, env.Client.Update(ctx, back), "spec.cancel cannot be set back to false: a cancelled call stays cancelled")
	requireInvalid(t, env.Client.Patch(ctx, get(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":false}}`))),
		"spec.cancel cannot be set back to false: a cancelled call stays cancelled")
	// Saying true again changes nothing and is accepted.
	if err := env.Client.Patch(ctx, get(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))); err != nil {
		t.Fatalf("cancel=true again refused: %v", err)
	}
}

// The immutability rule of ToolIntentSpec names each field but cancel (a CEL object
// cannot be compared without one field): a field added to the spec and not to the
// rule would be mutable.
func TestToolIntentSpecImmutabilityNamesEveryField(t *testing.T) {
	crd, err := os.ReadFile("../../config/crd/bases/toolgate.dev_toolintents.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The generated YAML folds the rule over lines; join them.
	text := strings.Join(strings.Fields(string(crd)), " ")
	start := strings.Index(text, "rule: self.taskRef == oldSelf.taskRef")
	if start < 0 {
		t.Fatal("the spec immutability rule is not in the CRD")
	}
	rule := text[start:]
	rule = rule[:strings.Index(rule, "- message:")]
	typ := reflect.TypeOf(v1.ToolIntentSpec{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "cancel" {
			if strings.Contains(rule, "self.cancel") {
				t.Errorf("the immutability rule covers cancel: %s", rule)
			}
			continue
		}
		if !strings.Contains(rule, "self."+name+" == oldSelf."+name) {
			t.Errorf("spec.%s is not in the immutability rule: %s", name, rule)
		}
	}
}

func TestToolIntentInputMustBeObject(t *testing.T) {
	ns := env.Namespace(t)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolIntent",
		"metadata": map[string]any{"name": "str-input", "namespace": ns},
		"spec": map[string]any{
			"taskRef": map[string]any{"name": "t"}, "tool": "bash", "requestedBy": "agent",
			"input": "rm -rf /",
		},
	}}
	requireInvalid(t, env.Client.Create(context.Background(), u), "spec.input")
}

func TestExecutionSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	exec := &v1.Execution{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e"},
		Spec: v1.ExecutionSpec{
			IntentRef: v1.LocalObjectReference{Name: "i"}, TaskRef: v1.LocalObjectReference{Name: "t"},
			Tool: v1.ToolBash, Input: runtime.RawExtension{Raw: []byte(`{"command":"ls"}`)},
			TimeoutSeconds: 10, MaxOutputBytes: 4096,
			Sandbox: v1.SandboxProfile{Image: "busybox", WorkspaceClaimName: "ws"},
		},
	}
	if err := env.Client.Create(ctx, exec); err != nil {
		t.Fatal(err)
	}
	exec.Spec.TimeoutSeconds = 99
	requireInvalid(t, env.Client.Update(ctx, exec), "spec is immutable: an Execution records one invocation")
}

func TestApprovalOnlyVotesChange(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	a := newApproval(ns, "a")
	if err := env.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a.Spec.Votes == nil || len(a.Spec.Votes) != 0 {
		t.Fatalf("votes default: got %#v, want an empty list", a.Spec.Votes)
	}

	// Request fields cannot change.
	for name, mutate := range map[string]func(*v1.Approval){
		"request":     func(x *v1.Approval) { x.Spec.Request.Input = `{"path":"other.go"}` },
		"fingerprint": func(x *v1.Approval) { x.Spec.Fingerprint = strings.Repeat("cd", 32) },
		"requestedBy": func(x *v1.Approval) { x.Spec.RequestedBy = "someone-else" },
		"intentRef":   func(x *v1.Approval) { x.Spec.IntentRef.Name = "other" },
		"expiresAt":   func(x *v1.Approval) { x.Spec.ExpiresAt = metav1.NewTime(x.Spec.ExpiresAt.Add(time.Hour)) },
		"approvers":   func(x *v1.Approval) { x.Spec.Approvers = &v1.Approvers{Users: []string{"mallory"}} },
		"required":    func(x *v1.Approval) { x.Spec.Approvers = &v1.Approvers{Required: 1} },
	} {
		t.Run(name, func(t *testing.T) {
			cur := &v1.Approval{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), cur); err != nil {
				t.Fatal(err)
			}
			mutate(cur)
			requireInvalid(t, env.Client.Update(ctx, cur), "only spec.votes of an Approval may change")
		})
	}

	// A vote can be added (who may add it is the admission policy's to say).
	cur := &v1.Approval{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), cur); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch("application/json-patch+json", []byte(`[{"op":"add","path":"/spec/votes/-","value":{"user":"alice","decision":"Approved","comment":"ok"}}]`))
	if err := env.Client.Patch(ctx, cur, patch); err != nil {
		t.Fatalf("vote refused: %v", err)
	}
	if len(cur.Spec.Votes) != 1 || cur.Spec.Votes[0].User != "alice" || cur.Spec.Votes[0].Decision != v1.DecisionApproved {
		t.Fatalf("vote not stored: %+v", cur.Spec)
	}

	// An unknown decision value is refused by the enum; a vote names its voter.
	bad := client.RawPatch("application/json-patch+json", []byte(`[{"op":"add","path":"/spec/votes/-","value":{"user":"bob","decision":"Maybe"}}]`))
	requireInvalid(t, env.Client.Patch(ctx, cur, bad), `spec.votes[1].decision: Unsupported value: "Maybe"`)
	nobody := client.RawPatch("application/json-patch+json", []byte(`[{"op":"add","path":"/spec/votes/-","value":{"decision":"Approved"}}]`))
	requireInvalid(t, env.Client.Patch(ctx, cur, nobody), `spec.votes[1].user: Required value`)
}

// TestApproversRequiredIsBounded: approvers.required is 1 to 16, and no more than
// the users listed when no group is.
func TestApproversRequiredIsBounded(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	for name, c := range map[string]struct {
		approvers *v1.Approvers
		want      string
	}{
		"negative":            {&v1.Approvers{Required: -1}, "should be greater than or equal to 1"},
		"seventeen":           {&v1.Approvers{Required: 17}, "should be less than or equal to 16"},
		"more than the users": {&v1.Approvers{Users: []string{"alice", "bob"}, Required: 3}, "approvers.required is more than the users listed and no group is listed: the approval could never be granted"},
	} {
		t.Run(name, func(t *testing.T) {
			a := newApproval(ns, strings.ReplaceAll(name, " ", "-"))
			a.Spec.Approvers = c.approvers
			requireInvalid(t, env.Client.Create(ctx, a), c.want)
		})
	}
	ok := newApproval(ns, "two-of-two")
	ok.Spec.Approvers = &v1.Approvers{Users: []string{"alice", "bob"}, Required: 2}
	if err := env.Client.Create(ctx, ok); err != nil {
		t.Fatalf("two of two listed users: %v", err)
	}
	group := newApproval(ns, "three-of-a-group")
	group.Spec.Approvers = &v1.Approvers{Users: []string{"alice"}, Groups: []string{"sre"}, Required: 3}
	if err := env.Client.Create(ctx, group); err != nil {
		t.Fatalf("three of a user and a group: %v", err)
	}
}

func TestToolPolicyCommandPatterns(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	mk := func(name, commands string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("toolgate.dev/v1alpha1")
		u.SetKind("ToolPolicy")
		u.SetNamespace(ns)
		u.SetName(name)
		var cmds any
		if err := jsonUnmarshal(commands, &cmds); err != nil {
			t.Fatal(err)
		}
		u.Object["spec"] = map[string]any{"rules": []any{map[string]any{
			"name": "r", "action": "Deny", "match": map[string]any{"commands": cmds},
		}}}
		return u
	}
	if err := env.Client.Create(ctx, mk("ok", `[{"prefix": ["git", "push"]}, {"prefix": ["rm"]}]`)); err != nil {
		t.Fatalf("valid pattern refused: %v", err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(mk("", "[]").GroupVersionKind())
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ok"}, got); err != nil {
		t.Fatal(err)
	}
	rule := got.Object["spec"].(map[string]any)["rules"].([]any)[0].(map[string]any)
	if stored := fmt.Sprint(rule["match"].(map[string]any)["commands"]); stored != "[map[prefix:[git push]] map[prefix:[rm]]]" {
		t.Fatalf("pattern round trip: stored %s", stored)
	}
	if rule["enforcement"] != string(v1.EnforcementEnforce) {
		t.Errorf("enforcement default: got %v", rule["enforcement"])
	}

	// Each malformed pattern is refused when the policy is created, naming the
	// pattern, rather than accepted and found out (or not) by the policy reconciler.
	for name, tc := range map[string]struct{ commands, want string }{
		"a bare list of words":       {`[["git", "push"]]`, `spec.rules[0].match.commands[0]: Invalid value: "array": spec.rules[0].match.commands[0] in body must be of type object`},
		"a position that is no word": {`[["git", {"not": "a word"}]]`, `spec.rules[0].match.commands[0]: Invalid value: "array"`},
		"no prefix":                  {`[{}]`, `spec.rules[0].match.commands[0].prefix: Required value`},
		"an empty prefix":            {`[{"prefix": []}]`, `spec.rules[0].match.commands[0].prefix: Invalid value: 0: spec.rules[0].match.commands[0].prefix in body should have at least 1 items`},
		"an empty word":              {`[{"prefix": ["git", ""]}]`, `spec.rules[0].match.commands[0].prefix[1]: Invalid value: "": spec.rules[0].match.commands[0].prefix[1] in body should be at least 1 chars long`},
		// A Deny rule on "git push" as one word would never match `git push`.
		"two words in one": {`[{"prefix": ["git push"]}]`, `spec.rules[0].match.commands[0].prefix[0]: Invalid value: "git push"`},
	} {
		t.Run(name, func(t *testing.T) {
			requireInvalid(t, env.Client.Create(ctx, mk("bad", tc.commands)), tc.want)
		})
	}

	badAction := mk("action", `[{"prefix": ["ls"]}]`)
	badAction.Object["spec"].(map[string]any)["rules"].([]any)[0].(map[string]any)["action"] = "Maybe"
	requireInvalid(t, env.Client.Create(ctx, badAction), `spec.rules[0].action: Unsupported value: "Maybe"`)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
