package pipeline

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func TestExecutionMismatch(t *testing.T) {
	yes := true
	owned := func(uid types.UID) *v1.Execution {
		return &v1.Execution{
			ObjectMeta: metav1.ObjectMeta{Name: "t-t0-0", OwnerReferences: []metav1.OwnerReference{{Kind: "ToolIntent", Name: "t-t0-0", UID: uid, Controller: &yes}}},
			Spec: v1.ExecutionSpec{
				IntentRef: v1.LocalObjectReference{Name: "t-t0-0"}, TaskRef: v1.LocalObjectReference{Name: "t"}, Tool: v1.ToolBash,
				Input: runtime.RawExtension{Raw: []byte(`{"command":"ls","timeoutMs":5}`)}, TimeoutSeconds: 60, Fingerprint: "f",
				Walls: &v1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true},
			},
		}
	}
	want := owned("u1")
	cases := []struct {
		name     string
		existing func() *v1.Execution
		problem  string
	}{
		{"its own, input in another key order", func() *v1.Execution {
			e := owned("u1")
			e.Spec.Input.Raw = []byte(`{"timeoutMs":5, "command":"ls"}`)
			return e
		}, ""},
		// The sandbox is built from the decision's record, never from the task as it
		// is now, so an earlier pass built the same one: another is not ours.
		{"another image than the decision recorded", func() *v1.Execution {
			e := owned("u1")
			e.Spec.Sandbox.Image = "another image the task named later"
			return e
		}, "another sandbox"},
		{"another workspace claim", func() *v1.Execution {
			e := owned("u1")
			e.Spec.Sandbox.WorkspaceClaimName = "someone-elses"
			return e
		}, "another sandbox"},
		{"no owner", func() *v1.Execution { e := owned("u1"); e.OwnerReferences = nil; return e }, "not controlled by this ToolIntent"},
		{"an earlier intent of the same name", func() *v1.Execution { return owned("u0") }, "not controlled by this ToolIntent"},
		{"another input", func() *v1.Execution {
			e := owned("u1")
			e.Spec.Input.Raw = []byte(`{"command":"rm -rf ."}`)
			return e
		}, "another input"},
		{"another fingerprint", func() *v1.Execution { e := owned("u1"); e.Spec.Fingerprint = "g"; return e }, "another approval or fingerprint"},
		{"walls taken down", func() *v1.Execution { e := owned("u1"); e.Spec.Walls = nil; return e }, "walls"},
		{"another task", func() *v1.Execution { e := owned("u1"); e.Spec.TaskRef.Name = "other"; return e }, "another call"},
	}
	for _, tc := range cases {
		got := ExecutionMismatch(tc.existing(), want)
		if tc.problem == "" && got != "" || tc.problem != "" && !strings.Contains(got, tc.problem) {
			t.Errorf("%s: ExecutionMismatch = %q, want %q", tc.name, got, tc.problem)
		}
	}
}
