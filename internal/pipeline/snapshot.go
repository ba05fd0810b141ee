package pipeline

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

// defaultMaxOutputBytes is the output cap of a task that sets none.
const defaultMaxOutputBytes = 32768

// DecideSandbox is where and how a decided call will run, resolved from its task as
// it is at decide time: the task's UID, its image (or defaultImage), runtimeClass,
// resources, workspace claim, network, output cap and the validated timeout, with
// the decision's walls applied. The walls only ever tighten the task's sandbox: a
// read-only workspace wall mounts the workspace read-only, a no-network wall
// replaces the task's egress with mode None (the executor's NetworkPolicy then
// denies all egress).
//
// It is recorded in the decision and hashed into its fingerprint (SealDecision), and
// the Execution is built from it alone (BuildExecution): the task's spec is mutable
// and a task can be deleted and created again under its name, so what was decided,
// and what a human approved, must not be read from the task again later.
func DecideSandbox(task *v1.AgentTask, val *v1.Validation, walls *v1.SandboxWalls, defaultImage string) (*v1.DecidedSandbox, error) {
	if val == nil {
		return nil, fmt.Errorf("no recorded validation to take the timeout from")
	}
	if task.UID == "" {
		return nil, fmt.Errorf("AgentTask %s has no UID (it was not read from the API server)", task.Name)
	}
	image := task.Spec.Sandbox.Image
	if image == "" {
		image = defaultImage
	}
	if image == "" {
		return nil, fmt.Errorf("AgentTask %s names no sandbox image and the controller has no default", task.Name)
	}
	maxOut := task.Spec.Budgets.MaxOutputBytes
	if maxOut <= 0 {
		maxOut = defaultMaxOutputBytes
	}
	s := &v1.DecidedSandbox{
		TaskUID: string(task.UID),
		Profile: v1.SandboxProfile{
			Image:              image,
			RuntimeClassName:   task.Spec.Sandbox.RuntimeClassName,
			Network:            *task.Spec.Sandbox.Network.DeepCopy(),
			WorkspaceClaimName: WorkspaceClaimName(task),
			WorkspaceSubPath:   WorkspaceSubPath(task),
			Isolation:          task.Spec.Sandbox.Isolation,
		},
		TimeoutSeconds: val.TimeoutSeconds,
		MaxOutputBytes: maxOut,
	}
	if r := task.Spec.Sandbox.Resources; r != nil {
		s.Profile.Resources = v1.SandboxResources{Limits: r.Limits.DeepCopy(), Requests: r.Requests.DeepCopy()}
	}
	if walls != nil {
		if walls.ReadOnlyWorkspace {
			s.Profile.ReadOnlyWorkspace = true
		}
		if walls.NoNetwork {
			s.Profile.Network = v1.NetworkSpec{Mode: v1.NetworkNone}
		}
	}
	// Store what the API server will give back: the fingerprint is computed again
	// from the recorded sandbox, so both must hash the same document.
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	out := &v1.DecidedSandbox{}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, err
	}
	return out, nil
}

// SealDecision records the sandbox in d and fingerprints d again with it: policy.Decide
// is pure and fingerprints the call without knowing where it runs.
func SealDecision(d *v1.Decision, req policy.Request, sandbox *v1.DecidedSandbox) {
	d.Sandbox = sandbox
	d.Fingerprint = policy.FingerprintWithSandbox(req.Namespace, req.Task, req.Tool, req.Input, d.PolicyRuleRef, d.Walls, sandbox)
}

// checkSandbox verifies that exec runs exactly in the sandbox the decision recorded.
func checkSandbox(exec *v1.Execution, s *v1.DecidedSandbox) error {
	e := exec.Spec
	switch {
	case !equality.Semantic.DeepEqual(e.Sandbox, s.Profile):
		return fmt.Errorf("spec.sandbox (image %s, workspace %s, network %s) is not the sandbox the decision recorded (image %s, workspace %s, network %s)",
			e.Sandbox.Image, e.Sandbox.WorkspaceClaimName, networkText(e.Sandbox.Network), s.Profile.Image, s.Profile.WorkspaceClaimName, networkText(s.Profile.Network))
	case e.TimeoutSeconds != s.TimeoutSeconds || e.MaxOutputBytes != s.MaxOutputBytes:
		return fmt.Errorf("spec.timeoutSeconds or spec.maxOutputBytes is not what the decision recorded")
	case e.Workdir != s.Workdir || !equality.Semantic.DeepEqual(emptyEnvNil(e.Env), emptyEnvNil(s.Env)):
		return fmt.Errorf("spec.workdir or spec.env is not what the decision recorded")
	}
	return nil
}

func emptyEnvNil(env []v1.EnvVar) []v1.EnvVar {
	if len(env) == 0 {
		return nil
	}
	return env
}

func networkText(n v1.NetworkSpec) string {
	if n.Mode == "" || n.Mode == v1.NetworkNone {
		return "None"
	}
	text := fmt.Sprintf("%s with %d egress rules", n.Mode, len(n.Egress))
	if n.ClusterDNS {
		text += " and cluster DNS"
	}
	return text
}

// SessionProfiles are the sandboxes a task's calls are decided to run in most: the
// task's own (the calls that write or reach the network, as far as the task allows)
// and the read-only one with no network that every call allowed as read-only gets
// (policy.Walls). A task with isolation Session keeps a warm session for
// each; a call decided into another sandbox gets a session of its own on demand.
func SessionProfiles(task *v1.AgentTask, defaultImage string) ([]v1.SandboxProfile, error) {
	var profiles []v1.SandboxProfile
	for _, walls := range []*v1.SandboxWalls{nil, {ReadOnlyWorkspace: true, NoNetwork: true}} {
		s, err := DecideSandbox(task, &v1.Validation{}, walls, defaultImage)
		if err != nil {
			return nil, err
		}
		profiles = append(profiles, s.Profile)
	}
	return profiles, nil
}
