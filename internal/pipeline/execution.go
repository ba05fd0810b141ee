package pipeline

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gitws"
)

// ExecutionName is the deterministic name of an intent's Execution, so a repeated
// create (after a restart, or from a racing reconcile) is AlreadyExists, never a second
// invocation.
func ExecutionName(intent *v1.ToolIntent) string { return intent.Name }

// ErrNoSandbox: the decision was recorded before decisions recorded their sandbox
// (DecidedSandbox). Where such a call would run can only be read from the task as it
// is now, which may not be what was decided or approved, so it does not run.
var ErrNoSandbox = errors.New("the decision records no sandbox")

// BuildExecution is the one invocation of an intent that was allowed (or approved):
// the normalized input, and the sandbox, timeout and output cap its decision
// recorded (DecideSandbox: the task's sandbox as it was when the call was decided,
// with the walls applied), and the approval it consumes. It never reads the task:
// a task changed, or deleted and created again, after the decision does not move
// the call. The Execution records the walls it was built with.
func BuildExecution(intent *v1.ToolIntent) (*v1.Execution, error) {
	val := intent.Status.Validation
	dec := intent.Status.Decision
	if val == nil || dec == nil {
		return nil, fmt.Errorf("intent %s has no recorded validation and decision", intent.Name)
	}
	if dec.Sandbox == nil {
		return nil, fmt.Errorf("intent %s: %w", intent.Name, ErrNoSandbox)
	}
	normalized, errs := NormalizedInput(intent)
	if len(errs) > 0 {
		return nil, fmt.Errorf("intent %s no longer validates: %v", intent.Name, errs)
	}
	s := dec.Sandbox
	if s.Profile.WorkspaceClaimName == "" {
		return nil, fmt.Errorf("intent %s's decision records no workspace claim", intent.Name)
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
			Workdir:        s.Workdir,
			TimeoutSeconds: s.TimeoutSeconds,
			MaxOutputBytes: s.MaxOutputBytes,
			BaselineSHA256: val.BaselineSHA256,
			Sandbox:        *s.Profile.DeepCopy(),
			Walls:          dec.Walls.DeepCopy(),
			ApprovalRef:    v1.LocalObjectReferenceTo(intent.Status.ApprovalName),
			Fingerprint:    dec.Fingerprint,
		},
	}
	exec.Spec.Env = append([]v1.EnvVar(nil), s.Env...)
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

// WorkspaceSubPath is the folder of the claim a task's tools see as /workspace: a
// git task's worktree (its git directory stays beside it, out of their reach); the
// whole claim otherwise.
func WorkspaceSubPath(task *v1.AgentTask) string {
	if task.Spec.Workspace.Git != nil {
		return gitws.WorktreeDir
	}
	return ""
}

// WorkspaceCloned says whether a task's workspace holds what its calls need: always
// for a claim given or created empty; for spec.workspace.git once the clone
// recorded its commit; for spec.workspace.copyOf once the copy recorded copiedAt.
func WorkspaceCloned(task *v1.AgentTask) bool {
	ws := task.Status.Workspace
	switch {
	case task.Spec.Workspace.Git != nil:
		return ws != nil && ws.Commit != ""
	case task.Spec.Workspace.CopyOf != nil:
		return ws != nil && ws.CopiedAt != nil
	}
	return true
}

// OwnedClaimName is the name of the claim toolgate creates for a task.
func OwnedClaimName(task *v1.AgentTask) string { return task.Name + ownedClaimSuffix }

const ownedClaimSuffix = "-workspace"

// TaskOfOwnedClaim is the task whose own claim (OwnedClaimName) would be called claim.
func TaskOfOwnedClaim(claim string) (string, bool) {
	return strings.CutSuffix(claim, ownedClaimSuffix)
}

// ExecutionMismatch says why an existing Execution of an intent's name is not the one
// the intent would create ("" when it is): it must be controlled by the intent (by
// UID) and carry the same call — intent, task, tool, input, approval, fingerprint,
// timeout, baseline, walls and sandbox (both built from the recorded decision, so an
// earlier pass built the same).
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
	case e.ApprovalName() != w.ApprovalName() || e.Fingerprint != w.Fingerprint:
		return fmt.Sprintf("Execution %s carries another approval or fingerprint", existing.Name)
	case e.TimeoutSeconds != w.TimeoutSeconds || e.BaselineSHA256 != w.BaselineSHA256 || !equality.Semantic.DeepEqual(e.Walls, w.Walls):
		return fmt.Sprintf("Execution %s has another timeout, baseline or walls", existing.Name)
	case !equality.Semantic.DeepEqual(e.Sandbox, w.Sandbox) || e.MaxOutputBytes != w.MaxOutputBytes || e.Workdir != w.Workdir || !equality.Semantic.DeepEqual(emptyEnvNil(e.Env), emptyEnvNil(w.Env)):
		return fmt.Sprintf("Execution %s runs in another sandbox than the decision recorded", existing.Name)
	}
	return ""
}
