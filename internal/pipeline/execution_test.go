package pipeline

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

const defaultImage = "toolgate/sandbox:default"

func TestBuildExecution(t *testing.T) {
	resources := &corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	egress := v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "10.0.0.0/8", Ports: []int32{443}}}}
	everywhere := v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "0.0.0.0/0"}}}
	cases := []struct {
		name   string
		intent *v1.ToolIntent
		task   *v1.AgentTask
		want   v1.ExecutionSpec // IntentRef, TaskRef and metadata are checked for every case
	}{
		{
			name: "bash with defaults: input normalized, default cap and image, owned claim, writable",
			intent: makeIntent("t-t0-0").tool(v1.ToolBash).input(`{ "timeoutMs": 1500, "command": "go test ./..." }`).
				validated(2, "").decided(v1.DecisionAllow).obj(),
			task: makeTask(testTask).obj(),
			want: v1.ExecutionSpec{
				Tool:           v1.ToolBash,
				Input:          runtime.RawExtension{Raw: []byte(`{"command":"go test ./...","timeoutMs":1500}`)},
				TimeoutSeconds: 2,
				MaxOutputBytes: 32768,
				Sandbox:        v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "t-workspace"},
				Fingerprint:    "fp-t-t0-0",
			},
		},
		{
			name:   "read-only tool: walls from the decision; the rest of the task's sandbox is copied",
			intent: makeIntent("t-t0-0").tool(v1.ToolReadFile).input(`{"path":"a.go","limit":10}`).validated(120, "").decidedByPolicy(v1.ModeEdit).obj(),
			task: makeTask(testTask).existingClaim("shared-src").budgets(v1.Budgets{MaxOutputBytes: 4096}).
				sandbox(v1.SandboxSpec{Image: "golang:1.26", RuntimeClassName: ptr("gvisor"), Resources: resources, Network: egress}).obj(),
			want: v1.ExecutionSpec{
				Tool:           v1.ToolReadFile,
				Input:          runtime.RawExtension{Raw: []byte(`{"limit":10,"path":"a.go"}`)},
				TimeoutSeconds: 120,
				MaxOutputBytes: 4096,
				Sandbox: v1.SandboxProfile{
					Image:              "golang:1.26",
					RuntimeClassName:   ptr("gvisor"),
					Resources:          v1.SandboxResources{Limits: resources.Limits, Requests: resources.Requests},
					Network:            v1.NetworkSpec{Mode: v1.NetworkNone},
					WorkspaceClaimName: "shared-src",
					ReadOnlyWorkspace:  true,
				},
				Walls:       &v1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, Reason: "read_file is a read-only tool"},
				Fingerprint: "fp-t-t0-0",
			},
		},
		{
			name:   "read-only bash in an Edit task with egress: read-only mount and no network",
			intent: makeIntent("t-t0-0").tool(v1.ToolBash).input(`{"command":"cat go.mod | grep module"}`).validated(120, "").decidedByPolicy(v1.ModeEdit).obj(),
			task:   makeTask(testTask).sandbox(v1.SandboxSpec{Network: egress}).obj(),
			want: v1.ExecutionSpec{
				Tool:           v1.ToolBash,
				Input:          runtime.RawExtension{Raw: []byte(`{"command":"cat go.mod | grep module"}`)},
				TimeoutSeconds: 120,
				MaxOutputBytes: 32768,
				Sandbox: v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "t-workspace", ReadOnlyWorkspace: true,
					Network: v1.NetworkSpec{Mode: v1.NetworkNone}},
				Walls:       &v1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, Reason: "every part of the call is read-only"},
				Fingerprint: "fp-t-t0-0",
			},
		},
		{
			// The attack the walls are for: egress to everywhere, and a call the
			// classifier calls read-only. Were it misjudged, it could neither write
			// nor send the workspace anywhere.
			name:   "read-only bash in an Auto task open to the whole internet: still no network",
			intent: makeIntent("t-t0-0").tool(v1.ToolBash).input(`{"command":"ls -la"}`).validated(120, "").decidedByPolicy(v1.ModeAuto).obj(),
			task:   makeTask(testTask).mode(v1.ModeAuto).sandbox(v1.SandboxSpec{Network: everywhere}).obj(),
			want: v1.ExecutionSpec{
				Tool:           v1.ToolBash,
				Input:          runtime.RawExtension{Raw: []byte(`{"command":"ls -la"}`)},
				TimeoutSeconds: 120,
				MaxOutputBytes: 32768,
				Sandbox: v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "t-workspace", ReadOnlyWorkspace: true,
					Network: v1.NetworkSpec{Mode: v1.NetworkNone}},
				Walls:       &v1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, Reason: "every part of the call is read-only"},
				Fingerprint: "fp-t-t0-0",
			},
		},
		{
			name:   "write bash allowed in Auto keeps the task's writable workspace and egress",
			intent: makeIntent("t-t0-0").tool(v1.ToolBash).input(`{"command":"go test ./... > test.log"}`).validated(120, "").decidedByPolicy(v1.ModeAuto).obj(),
			task:   makeTask(testTask).mode(v1.ModeAuto).sandbox(v1.SandboxSpec{Network: egress}).obj(),
			want: v1.ExecutionSpec{
				Tool:           v1.ToolBash,
				Input:          runtime.RawExtension{Raw: []byte(`{"command":"go test ./... > test.log"}`)},
				TimeoutSeconds: 120,
				MaxOutputBytes: 32768,
				Sandbox:        v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "t-workspace", Network: egress},
				Fingerprint:    "fp-t-t0-0",
			},
		},
		{
			name:   "bash in a ReadOnly task mounts the workspace read-only too",
			intent: makeIntent("t-t0-0").tool(v1.ToolBash).input(`{"command":"git log"}`).validated(120, "").decidedByPolicy(v1.ModeReadOnly).obj(),
			task:   makeTask(testTask).mode(v1.ModeReadOnly).obj(),
			want: v1.ExecutionSpec{
				Tool:           v1.ToolBash,
				Input:          runtime.RawExtension{Raw: []byte(`{"command":"git log"}`)},
				TimeoutSeconds: 120,
				MaxOutputBytes: 32768,
				Sandbox: v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "t-workspace", ReadOnlyWorkspace: true,
					Network: v1.NetworkSpec{Mode: v1.NetworkNone}},
				Walls:       &v1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, Reason: "every part of the call is read-only; the task's mode is ReadOnly"},
				Fingerprint: "fp-t-t0-0",
			},
		},
		{
			name: "approved edit carries its baseline, approval and fingerprint",
			intent: makeIntent("t-t3-1").tool(v1.ToolEditFile).input(`{"path":"a.go","oldText":"x","newText":"y"}`).
				validated(60, "sha-a").decided(v1.DecisionAsk).approved().obj(),
			task: makeTask(testTask).obj(),
			want: v1.ExecutionSpec{
				Tool:           v1.ToolEditFile,
				Input:          runtime.RawExtension{Raw: []byte(`{"newText":"y","oldText":"x","path":"a.go"}`)},
				TimeoutSeconds: 60,
				MaxOutputBytes: 32768,
				BaselineSHA256: "sha-a",
				Sandbox:        v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "t-workspace"},
				ApprovalRef:    v1.LocalObjectReferenceTo("t-t3-1"),
				Fingerprint:    "fp-t-t3-1",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seal(t, tc.intent, tc.task)
			got, err := BuildExecution(tc.intent)
			if err != nil {
				t.Fatalf("BuildExecution() error: %v", err)
			}
			want := &v1.Execution{
				ObjectMeta: metav1.ObjectMeta{
					Name:      tc.intent.Name,
					Namespace: testNS,
					Labels:    map[string]string{v1.LabelTask: tc.intent.Spec.TaskRef.Name, v1.LabelIntent: tc.intent.Name},
				},
				Spec: tc.want,
			}
			want.Spec.IntentRef = v1.LocalObjectReference{Name: tc.intent.Name}
			want.Spec.TaskRef = tc.intent.Spec.TaskRef
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("BuildExecution() mismatch (-want +got):\n%s", diff)
			}
			if ExecutionName(tc.intent) != got.Name {
				t.Errorf("ExecutionName() = %q, the execution is %q", ExecutionName(tc.intent), got.Name)
			}
		})
	}
}

// seal records in intent's decision the sandbox DecideSandbox resolves from task, as
// the controller does when it decides.
func seal(t *testing.T, intent *v1.ToolIntent, task *v1.AgentTask) {
	t.Helper()
	if task.UID == "" {
		task.UID = "task-uid"
	}
	sandbox, err := DecideSandbox(task, intent.Status.Validation, intent.Status.Decision.Walls, defaultImage)
	if err != nil {
		t.Fatalf("DecideSandbox() error: %v", err)
	}
	intent.Status.Decision.Sandbox = sandbox
}

// The execution's resources are a copy: changing the task, or the recorded sandbox,
// afterwards must not reach into an Execution already built.
func TestBuildExecutionCopiesResources(t *testing.T) {
	res := &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	task := makeTask(testTask).sandbox(v1.SandboxSpec{Resources: res}).obj()
	intent := makeIntent("i").validated(1, "").decided(v1.DecisionAllow).obj()
	seal(t, intent, task)
	exec, err := BuildExecution(intent)
	if err != nil {
		t.Fatal(err)
	}
	task.Spec.Sandbox.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("8")
	intent.Status.Decision.Sandbox.Profile.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("8")
	if got := exec.Spec.Sandbox.Resources.Limits[corev1.ResourceCPU]; got.String() != "1" {
		t.Errorf("cpu limit = %s after the task changed, want 1", got.String())
	}
}

// The Execution is built from the decision's sandbox alone: a task changed after the
// decision (another image, egress, claim, resources) does not move the call. The
// task is not even an argument of BuildExecution; this pins that what was recorded
// is what is built.
func TestBuildExecutionIgnoresTheTaskAsItIsNow(t *testing.T) {
	task := makeTask(testTask).obj()
	intent := makeIntent("i").tool(v1.ToolBash).input(`{"command":"make"}`).validated(30, "").decided(v1.DecisionAllow).obj()
	seal(t, intent, task)
	task.Spec.Sandbox = v1.SandboxSpec{Image: "evil:latest", Network: v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "0.0.0.0/0"}}}}
	task.Spec.Workspace.ExistingClaim = "someone-elses"
	exec, err := BuildExecution(intent)
	if err != nil {
		t.Fatal(err)
	}
	want := v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "t-workspace"}
	if diff := cmp.Diff(want, exec.Spec.Sandbox); diff != "" {
		t.Errorf("sandbox (-want +got):\n%s", diff)
	}
}

// The walls are copied: a later change to the decision does not reach into an
// Execution already built.
func TestBuildExecutionCopiesWalls(t *testing.T) {
	intent := makeIntent("i").tool(v1.ToolBash).input(`{"command":"ls"}`).validated(1, "").decidedByPolicy(v1.ModeEdit).obj()
	seal(t, intent, makeTask(testTask).obj())
	exec, err := BuildExecution(intent)
	if err != nil {
		t.Fatal(err)
	}
	intent.Status.Decision.Walls.NoNetwork = false
	if !exec.Spec.Walls.NoNetwork {
		t.Error("the Execution shares the decision's walls instead of copying them")
	}
}

func TestBuildExecutionErrors(t *testing.T) {
	cases := []struct {
		name    string
		intent  *v1.ToolIntent
		wantErr string
	}{
		{name: "no validation", intent: makeIntent("i").decided(v1.DecisionAllow).obj(), wantErr: "intent i has no recorded validation and decision"},
		{name: "no decision", intent: makeIntent("i").validated(1, "").obj(), wantErr: "intent i has no recorded validation and decision"},
		{name: "input no longer valid", intent: makeIntent("i").input(`{"path":1}`).validated(1, "").decided(v1.DecisionAllow).obj(), wantErr: "intent i no longer validates: [/path: must be string, got number]"},
		// A decision recorded by a controller that predates decided sandboxes (and,
		// older still, walls): where it would run could only be read from the task
		// as it is now, so it is not built at all. This replaces deciding the walls
		// of such a decision again from its category.
		{name: "decision without a sandbox", intent: makeIntent("i").tool(v1.ToolReadFile).input(`{"path":"a.go"}`).validated(120, "").decided(v1.DecisionAllow).category(v1.CategoryReadOnly).obj(), wantErr: "the decision records no sandbox"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.intent.Status.Validation != nil && tc.intent.Status.Decision != nil && tc.intent.Status.Decision.Category == "" {
				seal(t, tc.intent, makeTask(testTask).obj())
			}
			got, err := BuildExecution(tc.intent)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("BuildExecution() = %v, %v; want error %q", got, err, tc.wantErr)
			}
		})
	}
}

func TestWorkspaceClaimName(t *testing.T) {
	if got := WorkspaceClaimName(makeTask("fix").obj()); got != "fix-workspace" {
		t.Errorf("owned claim = %q, want fix-workspace", got)
	}
	if got := WorkspaceClaimName(makeTask("fix").existingClaim("src").obj()); got != "src" {
		t.Errorf("existing claim = %q, want src", got)
	}
}
