package pipeline

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/tools"
)

// ExecutionName is the deterministic name of an intent's Execution, so a repeated
// create (after a restart, or from a racing reconcile) is AlreadyExists, never a second
// invocation.
func ExecutionName(intent *v1.ToolIntent) string { return intent.Name }

// BuildExecution is the one invocation of an intent that was allowed (or approved):
// the normalized input, the clamped timeout, the task's output cap and sandbox with
// the decision's walls applied, the workspace, and the approval it consumes.
//
// The walls (policy.Walls decides them) only ever tighten the task's sandbox: a
// read-only workspace wall mounts the workspace read-only, a no-network wall replaces
// the task's egress with mode None (the executor's NetworkPolicy then denies all
// egress). The Execution records the walls it was built with.
func BuildExecution(intent *v1.ToolIntent, task *v1.AgentTask, defaultImage string) (*v1.Execution, error) {
	val := intent.Status.Validation
	dec := intent.Status.Decision
	if val == nil || dec == nil {
		return nil, fmt.Errorf("intent %s has no recorded validation and decision", intent.Name)
	}
	normalized, errs := tools.Validate(intent.Spec.Tool, intent.Spec.Input.Raw)
	if len(errs) > 0 {
		return nil, fmt.Errorf("intent %s no longer validates: %v", intent.Name, errs)
	}
	claim := WorkspaceClaimName(task)
	if claim == "" {
		return nil, fmt.Errorf("task %s has no workspace claim yet", task.Name)
	}
	image := task.Spec.Sandbox.Image
	if image == "" {
		image = defaultImage
	}
	maxOut := task.Spec.Budgets.MaxOutputBytes
	if maxOut <= 0 {
		maxOut = 32768
	}
	exec := &v1.Execution{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ExecutionName(intent),
			Namespace: intent.Namespace,
			Labels:    ChildLabels(intent),
		},
		Spec: v1.ExecutionSpec{
			IntentRef:      v1.LocalObjectReference{Name: intent.Name},
			TaskRef:        intent.Spec.TaskRef,
			Tool:           intent.Spec.Tool,
			Input:          runtime.RawExtension{Raw: normalized},
			TimeoutSeconds: val.TimeoutSeconds,
			MaxOutputBytes: maxOut,
			BaselineSHA256: val.BaselineSHA256,
			Sandbox: v1.SandboxProfile{
				Image:              image,
				RuntimeClassName:   task.Spec.Sandbox.RuntimeClassName,
				Network:            *task.Spec.Sandbox.Network.DeepCopy(),
				WorkspaceClaimName: claim,
			},
			ApprovalRef: intent.Status.ApprovalRef,
			Fingerprint: dec.Fingerprint,
		},
	}
	// The read-only mount used to come from the tool's ReadOnly flag and the task's
	// mode; both are in the walls now (a read-only tool's category is read-only). A
	// decision recorded before walls existed has none: its walls are decided again
	// from its recorded category, so such an intent executing after an upgrade loses
	// neither wall. Deciding again can only add walls, never take one away.
	w := dec.Walls
	if w == nil {
		w = policy.Walls(task.Spec.Mode, intent.Spec.Tool, dec.Category)
	}
	if w != nil {
		exec.Spec.Walls = w.DeepCopy()
		if w.ReadOnlyWorkspace {
			exec.Spec.Sandbox.ReadOnlyWorkspace = true
		}
		if w.NoNetwork {
			exec.Spec.Sandbox.Network = v1.NetworkSpec{Mode: v1.NetworkNone}
		}
	}
	if r := task.Spec.Sandbox.Resources; r != nil {
		exec.Spec.Sandbox.Resources = *r.DeepCopy()
	}
	return exec, nil
}

// WorkspaceClaimName is the claim a task's executions mount: the existing claim it
// names, or the one it owns.
func WorkspaceClaimName(task *v1.AgentTask) string {
	if task.Spec.Workspace.ExistingClaim != "" {
		return task.Spec.Workspace.ExistingClaim
	}
	return OwnedClaimName(task)
}

// OwnedClaimName is the name of the claim toolgate creates for a task.
func OwnedClaimName(task *v1.AgentTask) string { return task.Name + "-workspace" }

// ExecutionMismatch says why an existing Execution of an intent's name is not the one
// the intent would create ("" when it is): it must be controlled by the intent (by
// UID) and carry the same call — intent, task, tool, input, approval, fingerprint,
// timeout, baseline and walls. The sandbox built from the task is not compared: the
// task may have changed since an earlier pass created it.
func ExecutionMismatch(existing, want *v1.Execution) string {
	owner := metav1.GetControllerOf(want)
	if owner == nil || !metav1.IsControlledBy(existing, &metav1.ObjectMeta{UID: owner.UID}) {
		return fmt.Sprintf("Execution %s is not controlled by this ToolIntent", existing.Name)
	}
	e, w := existing.Spec, want.Spec
	switch {
	case e.IntentRef != w.IntentRef || e.TaskRef != w.TaskRef || e.Tool != w.Tool:
		return fmt.Sprintf("Execution %s names another call (%s of %s, tool %s)", existing.Name, e.IntentRef.Name, e.TaskRef.Name, e.Tool)
	case !sameJSON(e.Input.Raw, w.Input.Raw):
		return fmt.Sprintf("Execution %s runs another input", existing.Name)
	case e.ApprovalRef != w.ApprovalRef || e.Fingerprint != w.Fingerprint:
		return fmt.Sprintf("Execution %s carries another approval or fingerprint", existing.Name)
	case e.TimeoutSeconds != w.TimeoutSeconds || e.BaselineSHA256 != w.BaselineSHA256 || !equality.Semantic.DeepEqual(e.Walls, w.Walls):
		return fmt.Sprintf("Execution %s has another timeout, baseline or walls", existing.Name)
	}
	return ""
}
