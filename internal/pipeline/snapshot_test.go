package pipeline

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

func TestDecideSandbox(t *testing.T) {
	resources := &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}
	egress := v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "10.0.0.0/8", Ports: []int32{443}}}}
	val := &v1.Validation{TimeoutSeconds: 90}
	bothWalls := &v1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true}
	cases := []struct {
		name  string
		task  *v1.AgentTask
		walls *v1.SandboxWalls
		want  v1.DecidedSandbox
	}{
		{
			name: "defaults: the controller's image, the owned claim, the default output cap, no network",
			task: makeTask("fix").uid("u1").obj(),
			want: v1.DecidedSandbox{TaskUID: "u1", TimeoutSeconds: 90, MaxOutputBytes: 32768,
				Profile: v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "fix-workspace"}},
		},
		{
			name: "the task's sandbox as it is: image, runtimeClass, resources, egress, existing claim, cap",
			task: makeTask("fix").uid("u1").existingClaim("src").budgets(v1.Budgets{MaxOutputBytes: 4096}).
				sandbox(v1.SandboxSpec{Image: "golang:1.26", RuntimeClassName: ptr("gvisor"), Resources: resources, Network: egress}).obj(),
			want: v1.DecidedSandbox{TaskUID: "u1", TimeoutSeconds: 90, MaxOutputBytes: 4096,
				Profile: v1.SandboxProfile{Image: "golang:1.26", RuntimeClassName: ptr("gvisor"), Resources: v1.SandboxResources{Limits: resources.Limits, Requests: resources.Requests}, Network: egress, WorkspaceClaimName: "src"}},
		},
		{
			name:  "walls: read-only mount and egress replaced by None",
			task:  makeTask("fix").uid("u1").sandbox(v1.SandboxSpec{Network: egress}).obj(),
			walls: bothWalls,
			want: v1.DecidedSandbox{TaskUID: "u1", TimeoutSeconds: 90, MaxOutputBytes: 32768,
				Profile: v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "fix-workspace", ReadOnlyWorkspace: true, Network: v1.NetworkSpec{Mode: v1.NetworkNone}}},
		},
		{
			name: "walls: cluster DNS replaced by None too",
			task: makeTask("fix").uid("u1").sandbox(v1.SandboxSpec{Network: v1.NetworkSpec{Mode: v1.NetworkAllowList, ClusterDNS: true,
				Egress: []v1.EgressRule{{CIDR: "10.0.0.0/8"}}}}).obj(),
			walls: &v1.SandboxWalls{NoNetwork: true},
			want: v1.DecidedSandbox{TaskUID: "u1", TimeoutSeconds: 90, MaxOutputBytes: 32768,
				Profile: v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "fix-workspace", Network: v1.NetworkSpec{Mode: v1.NetworkNone}}},
		},
		{
			name:  "a read-only mount wall alone keeps the task's egress",
			task:  makeTask("fix").uid("u1").sandbox(v1.SandboxSpec{Network: egress}).obj(),
			walls: &v1.SandboxWalls{ReadOnlyWorkspace: true},
			want: v1.DecidedSandbox{TaskUID: "u1", TimeoutSeconds: 90, MaxOutputBytes: 32768,
				Profile: v1.SandboxProfile{Image: defaultImage, WorkspaceClaimName: "fix-workspace", ReadOnlyWorkspace: true, Network: egress}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecideSandbox(tc.task, val, tc.walls, defaultImage)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&tc.want, got); diff != "" {
				t.Errorf("DecideSandbox (-want +got):\n%s", diff)
			}
			// What is recorded is what the API server gives back: recomputing the
			// fingerprint from the stored sandbox gives the same one.
			raw, _ := json.Marshal(got)
			var back v1.DecidedSandbox
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			fp := func(s *v1.DecidedSandbox) string {
				return policy.FingerprintWithSandbox(testNS, "fix", v1.ToolBash, []byte(`{}`), v1.ModeDefaultReference(v1.ModeEdit), tc.walls, s)
			}
			if fp(got) != fp(&back) {
				t.Error("the sandbox fingerprints differently after a round trip through JSON")
			}
			// A copy: changing the task afterwards does not reach the record.
			if tc.task.Spec.Sandbox.Resources != nil {
				tc.task.Spec.Sandbox.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("8")
				if q := got.Profile.Resources.Limits[corev1.ResourceCPU]; q.String() != "500m" {
					t.Errorf("the recorded cpu limit followed the task: %s", q.String())
				}
			}
		})
	}

	errs := []struct {
		name  string
		task  *v1.AgentTask
		val   *v1.Validation
		image string
		want  string
	}{
		{"no UID", makeTask("fix").obj(), val, defaultImage, "has no UID"},
		{"no validation", makeTask("fix").uid("u1").obj(), nil, defaultImage, "no recorded validation"},
		{"no image at all", makeTask("fix").uid("u1").obj(), val, "", "no sandbox image"},
	}
	for _, tc := range errs {
		if _, err := DecideSandbox(tc.task, tc.val, nil, tc.image); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DecideSandbox error = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// SealDecision fingerprints the decision with its sandbox: two tasks of the same name
// (the second created after the first was deleted) or the same task before and after
// its egress was opened give the same call different fingerprints.
func TestSealDecision(t *testing.T) {
	req := policy.Request{Namespace: testNS, Task: "fix", Mode: v1.ModeEdit, Tool: v1.ToolBash, Input: []byte(`{"command":"make"}`)}
	val := &v1.Validation{TimeoutSeconds: 60}
	sealed := func(task *v1.AgentTask) v1.Decision {
		d := policy.Decide(req, nil, nil, nil)
		s, err := DecideSandbox(task, val, d.Walls, defaultImage)
		if err != nil {
			t.Fatal(err)
		}
		SealDecision(&d, req, s)
		return d
	}
	first := sealed(makeTask("fix").uid("u1").obj())
	if first.Sandbox == nil || first.Sandbox.TaskUID != "u1" {
		t.Fatalf("sealed decision records no sandbox: %+v", first.Sandbox)
	}
	if unsealed := policy.Decide(req, nil, nil, nil); unsealed.Fingerprint == first.Fingerprint {
		t.Error("sealing must fingerprint the sandbox too")
	}
	if want := policy.FingerprintWithSandbox(req.Namespace, req.Task, req.Tool, req.Input, first.PolicyRuleRef, first.Walls, first.Sandbox); first.Fingerprint != want {
		t.Errorf("fingerprint %s, want %s", first.Fingerprint, want)
	}
	for name, task := range map[string]*v1.AgentTask{
		"re-created task": makeTask("fix").uid("u2").obj(),
		"egress opened": makeTask("fix").uid("u1").sandbox(v1.SandboxSpec{Network: v1.NetworkSpec{Mode: v1.NetworkAllowList,
			Egress: []v1.EgressRule{{CIDR: "0.0.0.0/0"}}}}).obj(),
		"another claim": makeTask("fix").uid("u1").existingClaim("other").obj(),
		"another image": makeTask("fix").uid("u1").sandbox(v1.SandboxSpec{Image: "evil:latest"}).obj(),
	} {
		if sealed(task).Fingerprint == first.Fingerprint {
			t.Errorf("%s: same fingerprint", name)
		}
	}
	if sealed(makeTask("fix").uid("u1").obj()).Fingerprint != first.Fingerprint {
		t.Error("the same call in the same sandbox must fingerprint the same")
	}
}
