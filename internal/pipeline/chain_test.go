package pipeline

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// chainFixture is a whole chain: an allowed intent and the Execution it recorded.
func chainFixture() (*v1.Execution, *v1.ToolIntent) {
	fp := strings.Repeat("ab", 32)
	intent := &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fix-t1-0", UID: "intent-uid"},
		Spec: v1.ToolIntentSpec{
			TaskRef: v1.LocalObjectReference{Name: "fix"}, Tool: v1.ToolBash,
			Input: runtime.RawExtension{Raw: []byte(`{"command":"go test ./..."}`)}, RequestedBy: "alice",
		},
		Status: v1.ToolIntentStatus{
			Validation: &v1.Validation{TimeoutSeconds: 60},
			Decision: &v1.Decision{Action: v1.DecisionAllow, Fingerprint: fp, Sandbox: &v1.DecidedSandbox{
				TaskUID: "task-uid", Profile: fixtureSandbox(), TimeoutSeconds: 60, MaxOutputBytes: 4096,
			}},
			ExecutionName: "fix-t1-0",
		},
	}
	exec := &v1.Execution{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "fix-t1-0",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1.GroupVersion.String(), Kind: "ToolIntent", Name: "fix-t1-0", UID: "intent-uid", Controller: ptr(true),
			}},
		},
		Spec: v1.ExecutionSpec{
			IntentRef: v1.LocalObjectReference{Name: "fix-t1-0"}, TaskRef: v1.LocalObjectReference{Name: "fix"},
			Tool: v1.ToolBash, Input: runtime.RawExtension{Raw: []byte(`{ "command": "go test ./..." }`)},
			TimeoutSeconds: 60, MaxOutputBytes: 4096, Fingerprint: fp, Sandbox: fixtureSandbox(),
		},
	}
	return exec, intent
}

func fixtureSandbox() v1.SandboxProfile {
	return v1.SandboxProfile{
		Image: "golang:1.26", WorkspaceClaimName: "fix-workspace",
		Network: v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "10.0.0.0/8", Ports: []int32{443}}}},
	}
}

// asked turns the fixture into an Ask whose approval exec consumed.
func asked(exec *v1.Execution, intent *v1.ToolIntent) *v1.Approval {
	intent.Status.Decision.Action = v1.DecisionAsk
	intent.Status.ApprovalName = "fix-t1-0"
	exec.Spec.ApprovalRef = v1.LocalObjectReferenceTo("fix-t1-0")
	return &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "fix-t1-0",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1.GroupVersion.String(), Kind: "ToolIntent", Name: "fix-t1-0", UID: "intent-uid", Controller: ptr(true),
			}},
		},
		Spec: v1.ApprovalSpec{
			IntentRef: v1.LocalObjectReference{Name: "fix-t1-0"}, Fingerprint: exec.Spec.Fingerprint,
			Votes: fixtures.Votes(v1.DecisionApproved, "bob", ""), ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour)),
		},
		Status: v1.ApprovalStatus{State: v1.ApprovalStateConsumed, ConsumedByExecutionName: "fix-t1-0"},
	}
}

func TestCheckChain(t *testing.T) {
	cases := []struct {
		name string
		// mutate breaks the whole chain; it returns the approval to check.
		mutate  func(exec *v1.Execution, intent *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval)
		link    string // "" when the chain holds
		pending bool
		want    string
	}{
		{name: "allowed and recorded", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) { return i, nil }},
		{name: "asked and consumed by it", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) { return i, asked(e, i) }},
		{name: "input numbers written differently", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Spec.Tool, e.Spec.Tool = v1.ToolReadFile, v1.ToolReadFile
			i.Spec.Input.Raw = []byte(`{"path":"a.go","offset":10}`)
			e.Spec.Input.Raw = []byte(`{"offset":10.0,"path":"a.go"}`)
			return i, nil
		}},
		{name: "no intent", link: "owner", want: "does not exist", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) { return nil, nil }},
		{name: "no owner", link: "owner", want: "not controlled by a ToolIntent", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.OwnerReferences = nil
			return i, nil
		}},
		{name: "owner is not a controller", link: "owner", want: "not controlled by a ToolIntent", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.OwnerReferences[0].Controller = nil
			return i, nil
		}},
		{name: "owner of another kind", link: "owner", want: "not controlled by a ToolIntent", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.OwnerReferences[0].Kind = "AgentTask"
			return i, nil
		}},
		{name: "owner is an earlier intent of the name", link: "owner", want: "not by the live ToolIntent", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.UID = "recreated-uid"
			return i, nil
		}},
		{name: "intent being deleted", link: "owner", want: "being deleted", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.DeletionTimestamp = ptr(metav1.Now())
			return i, nil
		}},
		{name: "another task", link: "task", want: "not ToolIntent fix-t1-0's task fix", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.TaskRef.Name = "other"
			return i, nil
		}},
		{name: "another tool", link: "spec", want: "spec.tool", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.Tool = v1.ToolReadFile
			return i, nil
		}},
		{name: "another input", link: "spec", want: "spec.input", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.Input.Raw = []byte(`{"command":"rm -rf ."}`)
			return i, nil
		}},
		{name: "another timeout", link: "spec", want: "spec.timeoutSeconds", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.TimeoutSeconds = 86400
			return i, nil
		}},
		{name: "walls dropped", link: "spec", want: "spec.walls", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.Decision.Walls = &v1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true}
			return i, nil
		}},
		{name: "walls recorded, not honoured", link: "spec", want: "read-only", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.Decision.Walls = &v1.SandboxWalls{ReadOnlyWorkspace: true}
			e.Spec.Walls = &v1.SandboxWalls{ReadOnlyWorkspace: true}
			return i, nil
		}},
		{name: "network wall, egress open", link: "spec", want: "allows egress", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.Decision.Walls = &v1.SandboxWalls{NoNetwork: true}
			e.Spec.Walls = &v1.SandboxWalls{NoNetwork: true}
			e.Spec.Sandbox.Network = v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "0.0.0.0/0"}}}
			return i, nil
		}},
		{name: "network wall, cluster DNS open", link: "spec", want: "allows egress", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.Decision.Walls = &v1.SandboxWalls{NoNetwork: true}
			e.Spec.Walls = &v1.SandboxWalls{NoNetwork: true}
			e.Spec.Sandbox.Network = v1.NetworkSpec{Mode: v1.NetworkNone, ClusterDNS: true}
			return i, nil
		}},
		// The sandbox is the one the decision recorded (DecideSandbox), never the
		// task's as it is when the Execution appears.
		{name: "another image", link: "sandbox", want: "image evil:latest", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.Sandbox.Image = "evil:latest"
			return i, nil
		}},
		{name: "egress opened", link: "sandbox", want: "not the sandbox the decision recorded", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.Sandbox.Network.Egress = []v1.EgressRule{{CIDR: "0.0.0.0/0"}}
			return i, nil
		}},
		{name: "cluster DNS opened", link: "sandbox", want: "AllowList with 0 egress rules and cluster DNS", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.Sandbox.Network = v1.NetworkSpec{Mode: v1.NetworkAllowList, ClusterDNS: true}
			return i, nil
		}},
		{name: "another workspace claim", link: "sandbox", want: "workspace someone-elses", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.Sandbox.WorkspaceClaimName = "someone-elses"
			return i, nil
		}},
		{name: "runtimeClass dropped", link: "sandbox", want: "not the sandbox", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.Decision.Sandbox.Profile.RuntimeClassName = ptr("gvisor")
			return i, nil
		}},
		{name: "another output cap", link: "sandbox", want: "spec.maxOutputBytes", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.MaxOutputBytes = 1 << 20
			return i, nil
		}},
		{name: "env added", link: "sandbox", want: "spec.env", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.Env = []v1.EnvVar{{Name: "LD_PRELOAD", Value: "/workspace/x.so"}}
			return i, nil
		}},
		{name: "decision without a sandbox", link: "sandbox", want: "records no sandbox", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.Decision.Sandbox = nil
			return i, nil
		}},
		{name: "denied", link: "decision", want: "decided Deny", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.Decision.Action = v1.DecisionDeny
			i.Status.ExecutionName = ""
			i.Status.Observation = &v1.Observation{Outcome: v1.OutcomeDenied}
			return i, nil
		}},
		{name: "ended before a decision", link: "decision", want: "without a decision", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status = v1.ToolIntentStatus{Observation: &v1.Observation{Outcome: v1.OutcomeValidationFailed}}
			return i, nil
		}},
		{name: "not decided yet", link: "decision", pending: true, want: "has not recorded its decision", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status = v1.ToolIntentStatus{}
			return i, nil
		}},
		{name: "fingerprint differs", link: "fingerprint", want: "is not the fingerprint", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.Fingerprint = strings.Repeat("cd", 32)
			return i, nil
		}},
		{name: "decision without fingerprint", link: "fingerprint", want: "is not the fingerprint", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.Decision.Fingerprint, e.Spec.Fingerprint = "", ""
			return i, nil
		}},
		{name: "allow naming an approval", link: "approval", want: "without an approval", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			e.Spec.ApprovalRef = v1.LocalObjectReferenceTo("fix-t1-0")
			return i, nil
		}},
		{name: "ask without approvalRef", link: "approval", want: "names no Approval", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			a := asked(e, i)
			e.Spec.ApprovalRef = nil
			return i, a
		}},
		{name: "ask, another approval", link: "approval", want: "is not ToolIntent fix-t1-0's Approval", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			a := asked(e, i)
			e.Spec.ApprovalRef = v1.LocalObjectReferenceTo("other")
			return i, a
		}},
		{name: "ask, approval missing", link: "approval", want: "does not exist", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			asked(e, i)
			return i, nil
		}},
		{name: "ask, approval of an earlier intent", link: "approval", want: "is not ToolIntent fix-t1-0's own", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			a := asked(e, i)
			a.OwnerReferences[0].UID = "earlier-uid"
			return i, a
		}},
		{name: "ask, approval pending", link: "approval", want: "is Pending", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			a := asked(e, i)
			a.Status = v1.ApprovalStatus{}
			return i, a
		}},
		{name: "ask, approved but not consumed", link: "approval", want: "not consumed by Execution fix-t1-0", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			a := asked(e, i)
			a.Status = v1.ApprovalStatus{State: v1.ApprovalStateApproved}
			return i, a
		}},
		{name: "ask, consumed by another Execution", link: "approval", want: `consumed by "other"`, mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			a := asked(e, i)
			a.Status.ConsumedByExecutionName = "other"
			return i, a
		}},
		{name: "ask, approval of another fingerprint", link: "approval", want: "was given for fingerprint", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			a := asked(e, i)
			a.Spec.Fingerprint = strings.Repeat("ef", 32)
			return i, a
		}},
		{name: "intent ran another Execution", link: "executionName", want: "as Execution other", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.ExecutionName = "other"
			return i, nil
		}},
		{name: "intent ended without an Execution", link: "executionName", want: "without naming an Execution", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.ExecutionName = ""
			i.Status.Observation = &v1.Observation{Outcome: v1.OutcomeAborted}
			return i, nil
		}},
		{name: "not recorded yet", link: "executionName", pending: true, want: "does not name Execution fix-t1-0 yet", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			i.Status.ExecutionName = ""
			return i, nil
		}},
		{name: "ask, consumed, not recorded yet", link: "executionName", pending: true, want: "yet", mutate: func(e *v1.Execution, i *v1.ToolIntent) (*v1.ToolIntent, *v1.Approval) {
			a := asked(e, i)
			i.Status.ExecutionName = ""
			return i, a
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exec, intent := chainFixture()
			intent, approval := tc.mutate(exec, intent)
			err := CheckChain(exec, intent, approval)
			if tc.link == "" {
				if err != nil {
					t.Fatalf("CheckChain = %v, want the chain whole", err)
				}
				return
			}
			var ce *ChainError
			if !errors.As(err, &ce) {
				t.Fatalf("CheckChain = %v, want a ChainError at %s", err, tc.link)
			}
			if ce.Link != tc.link || !strings.Contains(ce.Error(), tc.want) {
				t.Errorf("CheckChain = %s: %v, want %s: ...%s...", ce.Link, ce, tc.link, tc.want)
			}
			if errors.Is(err, ErrChainPending) != tc.pending {
				t.Errorf("pending = %t, want %t (%v)", !tc.pending, tc.pending, err)
			}
		})
	}
}
