package controller

import (
	"context"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
)

// openToTheInternet is the widest egress a task can give its calls.
var openToTheInternet = v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "0.0.0.0/0"}}}

// The sandbox enforces the verdict. In an Edit task whose calls may reach the whole
// internet, a bash call allowed because every part of it is read-only runs with the
// workspace mounted read-only and no egress at all: a command the classifier
// misjudged could neither write the workspace nor send it anywhere. A call a rule
// allows for another reason keeps the task's sandbox.
func TestReadOnlyCallRunsBehindWalls(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit, func(a *v1.AgentTask) { a.Spec.Sandbox.Network = openToTheInternet })
	p.policy("scripts", v1.PolicyRule{
		Name: "run-build", Action: v1.RuleAllow, Reason: "the build script is reviewed",
		Match: v1.RuleMatch{Commands: []v1.CommandPattern{commandPattern(t, "sh", "build.sh")}},
	})

	p.propose("t", 0, 0, v1.ToolBash, `{"command":"cat notes.txt | grep -n todo"}`)
	intent := p.condition("t-t0-0", v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonExecutionCreated)
	d := intent.Status.Decision
	want := &v1.SandboxWalls{ReadOnlyWorkspace: true, NoNetwork: true, Reason: "every part of the call is read-only"}
	if d.Action != v1.DecisionAllow || d.Category != v1.CategoryReadOnly || d.Walls == nil || *d.Walls != *want {
		t.Fatalf("decision: %s, category %s, walls %+v; want Allow, read-only, walls %+v", d.Action, d.Category, d.Walls, want)
	}
	exec := getExecution(t, p.ns, "t-t0-0")
	if exec.Spec.Walls == nil || *exec.Spec.Walls != *want {
		t.Errorf("the Execution records walls %+v; want %+v", exec.Spec.Walls, want)
	}
	sb := exec.Spec.Sandbox
	if !sb.ReadOnlyWorkspace || sb.Network.Mode != v1.NetworkNone || len(sb.Network.Egress) != 0 {
		t.Errorf("sandbox: read-only workspace %t, network %+v; want a read-only workspace and network None", sb.ReadOnlyWorkspace, sb.Network)
	}
	assertJobWorkspace(t, p, exec, true)
	assertEgress(t, p, exec, 0)

	p.propose("t", 0, 1, v1.ToolBash, `{"command":"sh build.sh"}`)
	intent = p.condition("t-t0-1", v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonExecutionCreated)
	if d := intent.Status.Decision; d.Action != v1.DecisionAllow || d.PolicyRuleRef.Rule != "run-build" || d.Walls != nil {
		t.Fatalf("decision of sh build.sh: %s by %s, walls %+v; want Allow by run-build without walls", d.Action, d.PolicyRuleRef, d.Walls)
	}
	exec = getExecution(t, p.ns, "t-t0-1")
	if exec.Spec.Walls != nil || exec.Spec.Sandbox.ReadOnlyWorkspace || exec.Spec.Sandbox.Network.Mode != v1.NetworkAllowList {
		t.Errorf("sh build.sh: walls %+v, read-only workspace %t, network %+v; want the task's writable workspace and egress",
			exec.Spec.Walls, exec.Spec.Sandbox.ReadOnlyWorkspace, exec.Spec.Sandbox.Network)
	}
	assertJobWorkspace(t, p, exec, false)
	assertEgress(t, p, exec, 1)
}

// A read-only call a rule asks about: the Approval shows the walls it will run
// behind, they cannot be edited away, and the approved call runs behind them (the
// fingerprint, which covers the walls, still matches).
func TestApprovalShowsAndKeepsTheWalls(t *testing.T) {
	p := startPipeline(t)
	p.task("t", v1.ModeEdit, func(a *v1.AgentTask) { a.Spec.Sandbox.Network = openToTheInternet })
	p.policy("careful", v1.PolicyRule{
		Name: "ask-secrets", Action: v1.RuleAsk, Reason: "reading the secrets folder needs a person",
		Match: v1.RuleMatch{Commands: []v1.CommandPattern{commandPattern(t, "cat", "secrets/token")}},
	})
	p.propose("t", 0, 0, v1.ToolBash, `{"command":"cat secrets/token"}`)

	a := p.approval("t-t0-0")
	w := a.Spec.Request.Walls
	if w == nil || !w.ReadOnlyWorkspace || !w.NoNetwork || w.Reason != "every part of the call is read-only" {
		t.Fatalf("the Approval asks with walls %+v; want a read-only workspace and no network", w)
	}
	a.Spec.Request.Walls = nil
	if err := env.Client.Update(context.Background(), a); !apierrors.IsInvalid(err) {
		t.Fatalf("taking the walls off a pending Approval: %v; want it refused as invalid", err)
	}

	p.decide("t-t0-0", v1.DecisionApproved, "bob", "")
	p.condition("t-t0-0", v1.ConditionApproved, metav1.ConditionTrue, v1.ReasonApprovalGranted)
	p.eventually("Execution t-t0-0", func() (bool, string) { return p.executionExists("t-t0-0"), "" })
	exec := getExecution(t, p.ns, "t-t0-0")
	if exec.Spec.Walls == nil || !exec.Spec.Sandbox.ReadOnlyWorkspace || exec.Spec.Sandbox.Network.Mode != v1.NetworkNone {
		t.Fatalf("approved read-only call: walls %+v, sandbox %+v; want both walls", exec.Spec.Walls, exec.Spec.Sandbox)
	}
	assertEgress(t, p, exec, 0)
}

// assertJobWorkspace checks how the Execution's Job mounts the workspace.
func assertJobWorkspace(t *testing.T, p *pipelineEnv, exec *v1.Execution, readOnly bool) {
	t.Helper()
	job := &batchv1.Job{}
	p.eventually("Job of "+exec.Name, func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: executor.JobName(exec)}, job)
		return err == nil, fmt.Sprint(err)
	})
	spec := job.Spec.Template.Spec
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly != readOnly {
			t.Errorf("Job %s: claim %s read-only %t; want %t", job.Name, v.PersistentVolumeClaim.ClaimName, v.PersistentVolumeClaim.ReadOnly, readOnly)
		}
	}
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/workspace" && m.ReadOnly != readOnly {
				t.Errorf("Job %s: container %s mounts /workspace read-only %t; want %t", job.Name, c.Name, m.ReadOnly, readOnly)
			}
		}
	}
}

// assertEgress checks the egress rules of the NetworkPolicy that fences the
// Execution's pod: none means every destination is denied.
func assertEgress(t *testing.T, p *pipelineEnv, exec *v1.Execution, rules int) {
	t.Helper()
	np := &networkingv1.NetworkPolicy{}
	p.eventually("NetworkPolicy of "+exec.Name, func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: executor.NetworkPolicyName(exec)}, np)
		return err == nil, fmt.Sprint(err)
	})
	job := &batchv1.Job{}
	p.eventually("Job of "+exec.Name, func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.ns, Name: executor.JobName(exec)}, job)
		return err == nil, fmt.Sprint(err)
	})
	if selector, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || selector.Empty() || !selector.Matches(labels.Set(job.Spec.Template.Labels)) {
		t.Errorf("NetworkPolicy %s selects %v, not the pod of Job %s (labels %v)", np.Name, np.Spec.PodSelector.MatchLabels, job.Name, job.Spec.Template.Labels)
	}
	deniesEgress := false
	for _, typ := range np.Spec.PolicyTypes {
		deniesEgress = deniesEgress || typ == networkingv1.PolicyTypeEgress
	}
	if !deniesEgress || len(np.Spec.Egress) != rules {
		t.Errorf("NetworkPolicy %s: policy types %v, %d egress rules; want Egress governed with %d rules", np.Name, np.Spec.PolicyTypes, len(np.Spec.Egress), rules)
	}
}
