package v1alpha1_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// TestRunningTaskCannotBeRewritten: what a task's calls were proposed, decided and
// run for is fixed once it exists. Each edit below was accepted before: a new goal
// (the model and a replay read it as turn 0), the agent switched between external
// and model, the git source removed after the clone (the tools' mount would become
// the whole claim, git directory included), the claim swapped; and an ended task
// set back to running. Each is refused with a message that says what to do.
func TestRunningTaskCannotBeRewritten(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)

	gitTask := newTask(ns, "git")
	gitTask.Spec.Workspace = v1.WorkspaceSpec{
		VolumeClaim: &v1.WorkspaceVolumeClaim{},
		Git:         &v1.GitSource{URL: "https://example.com/r.git"},
	}
	modelTask := newTask(ns, "model")
	modelTask.Spec.Agent = v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: "http://model.example/v1", Model: "m"}}
	for _, task := range []*v1.AgentTask{gitTask, modelTask, newTask(ns, "claim")} {
		if err := env.Client.Create(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	patch := func(name, body string) error {
		task := &v1.AgentTask{}
		task.Namespace, task.Name = ns, name
		return env.Client.Patch(ctx, task, client.RawPatch(types.MergePatchType, []byte(body)))
	}

	for _, tc := range []struct {
		name, task, patch, want string
	}{
		{"a new goal", "claim", `{"spec":{"goal":"delete the tests instead"}}`,
			"spec.goal is immutable: the task's turns were taken toward it, and the model and a replay read it as the task's first message; create a new task for another goal"},
		{"the external agent replaced by a model", "claim", `{"spec":{"agent":{"external":null,"model":{"baseURL":"http://evil.example/v1","model":"m"}}}}`,
			"spec.agent cannot switch between model and external: the task's turns and intents were proposed by the one it has; create a new task for the other"},
		{"the model replaced by an external agent", "model", `{"spec":{"agent":{"model":null,"external":{"proposers":{"users":["mallory"]}}}}}`,
			"spec.agent cannot switch between model and external"},
		{"git removed after the clone", "git", `{"spec":{"workspace":{"git":null}}}`,
			"spec.workspace.git cannot be added or removed: the workspace is cloned once, before the task is Ready, and the tools are kept from its git directory only while git is set; create a new task to work on another repository"},
		{"git added to a task that was not cloned", "model", `{"spec":{"workspace":{"existingClaim":null,"volumeClaim":{},"git":{"url":"https://example.com/r.git"}}}}`,
			"spec.workspace.git cannot be added or removed"},
		{"the claim swapped", "claim", `{"spec":{"workspace":{"existingClaim":"someone-elses-claim"}}}`,
			"spec.workspace.existingClaim and spec.workspace.volumeClaim are immutable: the task's calls were decided for and ran in that workspace; create a new task to work in another claim"},
		{"the owned claim swapped for an existing one", "git", `{"spec":{"workspace":{"volumeClaim":null,"git":null,"existingClaim":"someone-elses-claim"}}}`,
			"spec.workspace.existingClaim and spec.workspace.volumeClaim are immutable"},
		{"the owned claim's size changed", "git", `{"spec":{"workspace":{"volumeClaim":{"storage":"5Gi"}}}}`,
			"spec.workspace.existingClaim and spec.workspace.volumeClaim are immutable"},
		{"a model task marked done", "model", `{"spec":{"lifecycle":"Done"}}`,
			"spec.lifecycle Done finishes a task whose agent is external; a task with agent.model finishes with the model's final answer. Set spec.lifecycle to Cancelled to stop it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireInvalid(t, patch(tc.task, tc.patch), tc.want)
		})
	}

	// An ended task stays ended.
	if err := patch("claim", `{"spec":{"lifecycle":"Done"}}`); err != nil {
		t.Fatalf("marking an external task done was refused: %v", err)
	}
	requireInvalid(t, patch("claim", `{"spec":{"lifecycle":"Active"}}`),
		"spec.lifecycle cannot go back: Active may become Done or Cancelled and Done may become Cancelled, never Active again; a task told to end ends. Create a new task to go on")
	if err := patch("claim", `{"spec":{"lifecycle":"Cancelled"}}`); err != nil {
		t.Fatalf("cancelling a task marked done was refused: %v", err)
	}
	for _, back := range []string{"Active", "Done"} {
		requireInvalid(t, patch("claim", `{"spec":{"lifecycle":"`+back+`"}}`), "spec.lifecycle cannot go back")
	}
	// A merge patch that removes the field defaults it to Active: refused too.
	requireInvalid(t, patch("claim", `{"spec":{"lifecycle":null}}`), "spec.lifecycle cannot go back")

	// What may change on a running task still does: budgets, proposers, the clone's
	// credentials, a push, the sandbox.
	for name, body := range map[string]string{
		"budgets":     `{"spec":{"budgets":{"maxTurns":50}}}`,
		"credentials": `{"spec":{"workspace":{"git":{"secretRef":{"name":"git-creds"}}}}}`,
		"push":        `{"spec":{"workspace":{"git":{"push":{"branch":"toolgate/fix"}}}}}`,
		"proposers":   `{"spec":{"agent":{"external":{"proposers":{"users":["agent","bob"]}}}}}`,
		"sandbox":     `{"spec":{"sandbox":{"image":"golang:1.24"}}}`,
		"lifecycle":   `{"spec":{"lifecycle":"Cancelled"}}`,
	} {
		if err := patch("git", body); err != nil {
			t.Errorf("changing %s of a running task was refused: %v", name, err)
		}
	}
}
