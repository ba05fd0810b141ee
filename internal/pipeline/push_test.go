package pipeline

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gitws"
)

const (
	pushController = "system:serviceaccount:toolgate-system:toolgate-controller-manager"
	pushBase       = "1111111111111111111111111111111111111111"
	pushTree       = "2222222222222222222222222222222222222222"
)

// pushingTask is an external git task with spec.workspace.git.push, cloned at
// pushBase.
func pushingTask() *v1.AgentTask {
	task := makeTask(testTask).external().uid("uid-1").obj()
	task.Spec.Workspace = v1.WorkspaceSpec{Git: &v1.GitSource{
		URL: "https://git.example.com/calc.git", SecretRef: &v1.LocalObjectReference{Name: "clone-creds"},
		Push: &v1.GitPush{Branch: "agent/fix"},
	}}
	task.Status.Workspace = &v1.WorkspaceStatus{Commit: pushBase}
	return task
}

func pushInputJSON(t *testing.T, task *v1.AgentTask, mutate func(map[string]any)) string {
	t.Helper()
	in := PushInput(task, gitws.Record{Base: pushBase, Tree: pushTree, Files: []string{"calc.sh"}, FileCount: 1})
	raw, _ := json.Marshal(in)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if mutate != nil {
		mutate(m)
	}
	raw, _ = json.Marshal(m)
	return string(raw)
}

// Every way a git_push is not the task's own push is refused, each saying which.
func TestValidatePushOnlyAsTheTasksOwnPush(t *testing.T) {
	task := pushingTask()
	ok := func() *intentBuilder {
		return makeIntent(PushIntentName(testTask)).tool(v1.ToolGitPush).input(pushInputJSON(t, task, nil)).requestedBy(pushController).ownedBy(task)
	}
	cases := []struct {
		name   string
		intent *v1.ToolIntent
		task   *v1.AgentTask
		want   string // "" for valid
	}{
		{"the controller's push", ok().obj(), task, ""},
		{"a proposer of the task", ok().requestedBy("agent").obj(), task, "git_push is toolgate's own step"},
		{"nobody named", ok().requestedBy("").obj(), task, "an intent without a requester may not propose it"},
		{"not owned by the task", makeIntent(PushIntentName(testTask)).tool(v1.ToolGitPush).input(pushInputJSON(t, task, nil)).requestedBy(pushController).obj(), task, "is not owned by AgentTask t"},
		{"another name", makeIntent("t-second-push").tool(v1.ToolGitPush).input(pushInputJSON(t, task, nil)).requestedBy(pushController).ownedBy(task).obj(), task, "metadata.name: a task's push is ToolIntent t-git-push"},
		{"another branch", ok().input(pushInputJSON(t, task, func(m map[string]any) { m["branch"] = "main" })).obj(), task, `input/branch: "main" is not the task's spec.workspace.git.push.branch "agent/fix"`},
		{"another repository", ok().input(pushInputJSON(t, task, func(m map[string]any) { m["url"] = "https://evil.example.com/x.git" })).obj(), task, "input/url:"},
		{"another Secret", ok().input(pushInputJSON(t, task, func(m map[string]any) { m["secret"] = "admin-creds" })).obj(), task, `input/secret: "admin-creds" is not the task's push Secret "clone-creds"`},
		{"another base", ok().input(pushInputJSON(t, task, func(m map[string]any) { m["base"] = strings.Repeat("3", 40) })).obj(), task, "input/base:"},
		{"a tree that is no hash", ok().input(pushInputJSON(t, task, func(m map[string]any) { m["tree"] = "HEAD" })).obj(), task, "input/tree:"},
		{"a task without push", ok().obj(), makeTask(testTask).external().uid("uid-1").obj(), "has no spec.workspace.git.push"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Validate(ValidateInput{Intent: c.intent, Task: c.task, ControllerIdentity: pushController, EarlierIntents: 99})
			got := strings.Join(v.Errors, "\n")
			switch {
			case c.want == "" && got != "":
				t.Fatalf("refused: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Fatalf("errors %q, want one with %q", got, c.want)
			}
		})
	}
	// The push spends no budget: EarlierIntents above is past any maxIntents.
	budgeted := pushingTask()
	budgeted.Spec.Budgets.MaxIntents = 1
	if v := Validate(ValidateInput{Intent: ok().obj(), Task: budgeted, ControllerIdentity: pushController, EarlierIntents: 5}); len(v.Errors) > 0 {
		t.Fatalf("the push was held to the task's intent budget: %v", v.Errors)
	}
}

// Once a task's push is being prepared (status.workspace.push is set), the agent's
// intents are refused, saying which push is pending and what ends the wait; the
// push itself is not; a task whose push ended (it finished) refuses as any ended
// task does.
func TestValidateRefusesTheAgentWhileThePushIsPending(t *testing.T) {
	reading := pushingTask()
	reading.Spec.Lifecycle = v1.LifecycleDone
	reading.Status.Workspace.Push = &v1.PushStatus{Branch: "agent/fix"}
	pending := reading.DeepCopy()
	pending.Status.Workspace.Push.IntentName = PushIntentName(testTask)
	ended := pending.DeepCopy()
	ended.Status.Conditions = []metav1.Condition{{Type: v1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: v1.ReasonMarkedDone}}
	write := makeIntent("t-t3-0").tool(v1.ToolWriteFile).input(`{"path":"calc.sh","content":"echo harmless"}`).requestedBy("agent").obj()
	push := makeIntent(PushIntentName(testTask)).tool(v1.ToolGitPush).input(pushInputJSON(t, pending, nil)).requestedBy(pushController).ownedBy(pending).obj()
	cases := []struct {
		name   string
		intent *v1.ToolIntent
		task   *v1.AgentTask
		want   []string // nil for valid
	}{
		{"the agent, before the push", write, pushingTask(), nil},
		{"the agent, while the change is read", write, reading, []string{`spec.taskRef: AgentTask "t" accepts no more intents: its change is being read to be pushed to branch agent/fix`, "as ToolIntent t-git-push", "until that push is approved, denied or the task cancelled"}},
		{"the agent, while the push waits", write, pending, []string{`accepts no more intents: its push is pending: ToolIntent t-git-push pushes its change to branch agent/fix`, "until that push is approved, denied or the task cancelled", "the task ends with the push"}},
		{"the agent, after the push", write, ended, []string{`accepts no more intents: it Succeeded`}},
		{"the push itself", push, pending, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Validate(ValidateInput{Intent: c.intent, Task: c.task, ControllerIdentity: pushController})
			got := strings.Join(v.Errors, "\n")
			if c.want == nil && got != "" {
				t.Fatalf("refused: %s", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Fatalf("errors %q, want one with %q", got, w)
				}
			}
			if strings.Contains(got, "it Succeeded") && strings.Contains(got, "push is pending") {
				t.Fatalf("an ended task is said to push: %q", got)
			}
		})
	}
}

// The task ends on the push's observation, and the push is no call of the agent's.
func TestTaskStatusWaitsForThePush(t *testing.T) {
	task := pushingTask()
	task.Spec.Lifecycle = v1.LifecycleDone
	push := func(o v1.Outcome, summary string) *v1.ToolIntent {
		in := makeIntent(PushIntentName(testTask)).tool(v1.ToolGitPush).requestedBy(pushController).ownedBy(task).decided(v1.DecisionAsk).obj()
		if o != "" {
			in.Status.Observation = &v1.Observation{Outcome: o, Summary: summary}
		}
		return in
	}
	commit := strings.Repeat("c", 40)
	cases := []struct {
		name       string
		world      *PushWorld
		typ        string // the terminal condition, "" while running
		reason     string
		msg        string
		wantCommit string
	}{
		{name: "the change is being read", world: nil, msg: "reading the workspace's change"},
		{name: "the task's calls still run", world: &PushWorld{Waiting: "session pod toolgate-session-1"}, msg: "waiting for session pod toolgate-session-1 to end: the workspace's change is read, to be pushed to branch agent/fix, once nothing of the task runs"},
		{name: "nothing to push", world: &PushWorld{Record: &gitws.Record{Base: pushBase}}, typ: v1.ConditionSucceeded, reason: v1.ReasonMarkedDone, msg: "nothing was pushed"},
		{name: "the change could not be read", world: &PushWorld{Failure: "the change pod failed"}, typ: v1.ConditionFailed, reason: v1.ReasonPushFailed, msg: "the change pod failed"},
		{name: "waiting for the approval", world: &PushWorld{Intent: push("", "")}, msg: "pushes the change to branch agent/fix"},
		{name: "pushed", world: &PushWorld{Intent: push(v1.OutcomeSucceeded, "[exit code: 0]\n"+PushedText(gitws.Pushed{Commit: commit, Branch: "agent/fix", Files: 1}, "u"))},
			typ: v1.ConditionSucceeded, reason: v1.ReasonMarkedDone, msg: "pushed as commit " + commit, wantCommit: commit},
		{name: "denied by a human", world: &PushWorld{Intent: push(v1.OutcomeApprovalDenied, "")}, typ: v1.ConditionFailed, reason: v1.ReasonPushDenied, msg: "nothing was pushed"},
		{name: "approval expired", world: &PushWorld{Intent: push(v1.OutcomeApprovalExpired, "")}, typ: v1.ConditionFailed, reason: v1.ReasonPushDenied, msg: "ApprovalExpired"},
		{name: "denied by a rule", world: &PushWorld{Intent: push(v1.OutcomeDenied, "")}, typ: v1.ConditionFailed, reason: v1.ReasonPushDenied, msg: "Denied"},
		{name: "the push failed", world: &PushWorld{Intent: push(v1.OutcomeFailed, "[exit code: 1]\nnot pushed (branch-exists): it has branch agent/fix")}, typ: v1.ConditionFailed, reason: v1.ReasonPushFailed, msg: "branch-exists"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			world := readyWorld(makeIntent("t-t0-0").tool(v1.ToolReadFile).observed(v1.OutcomeSucceeded).val())
			world.Workspace = task.Status.Workspace
			world.Push = c.world
			if c.world != nil && c.world.Intent != nil {
				world.Intents = append(world.Intents, *c.world.Intent)
			}
			st := TaskStatus(task, world, metav1.NewTime(epoch))
			if st.Intents.Total != 1 || st.Intents.InFlight != 0 {
				t.Fatalf("the push counts among the agent's intents: %+v", st.Intents)
			}
			if st.Workspace == nil || st.Workspace.Push == nil || st.Workspace.Push.Branch != "agent/fix" || st.Workspace.Push.Commit != c.wantCommit {
				t.Fatalf("status.workspace.push %+v", st.Workspace)
			}
			if c.typ == "" {
				if done := meta.IsStatusConditionTrue(st.Conditions, v1.ConditionSucceeded) || meta.IsStatusConditionTrue(st.Conditions, v1.ConditionFailed); done {
					t.Fatalf("the task ended before its push: %+v", st.Conditions)
				}
				if !strings.Contains(st.Workspace.Push.Message, c.msg) {
					t.Fatalf("push message %q, want %q", st.Workspace.Push.Message, c.msg)
				}
				return
			}
			got := meta.FindStatusCondition(st.Conditions, c.typ)
			if got == nil || got.Status != metav1.ConditionTrue || got.Reason != c.reason || !strings.Contains(got.Message, c.msg) {
				t.Fatalf("%s = %+v, want %s with %q", c.typ, got, c.reason, c.msg)
			}
		})
	}
	// Waiting for a human on the push, the task awaits approval.
	world := readyWorld()
	world.Workspace = task.Status.Workspace
	in := push("", "")
	world.Intents, world.Push = []v1.ToolIntent{*in}, &PushWorld{Intent: in}
	if st := TaskStatus(task, world, metav1.NewTime(epoch)); st.Phase != v1.TaskAwaitingApproval {
		t.Fatalf("a task whose push waits for a human is %s", st.Phase)
	}
	// The branch shown is the one the push's approved input names, even once the
	// spec names another.
	pushed := push(v1.OutcomeSucceeded, PushedText(gitws.Pushed{Commit: commit, Branch: "agent/fix", Files: 1}, "u"))
	pushed.Spec.Input.Raw = []byte(pushInputJSON(t, task, nil))
	moved := task.DeepCopy()
	moved.Spec.Workspace.Git.Push.Branch = "agent/elsewhere"
	world.Intents, world.Push = []v1.ToolIntent{*pushed}, &PushWorld{Intent: pushed}
	if st := TaskStatus(moved, world, metav1.NewTime(epoch)); st.Workspace.Push.Branch != "agent/fix" ||
		!strings.Contains(meta.FindStatusCondition(st.Conditions, v1.ConditionSucceeded).Message, "to branch agent/fix") {
		t.Fatalf("after the spec's branch changed: %+v %+v", st.Workspace.Push, st.Conditions)
	}
	// Without push, a task that would succeed does at once.
	plain := makeTask(testTask).external().done().obj()
	if st := TaskStatus(plain, readyWorld(), metav1.NewTime(epoch)); st.Phase != v1.TaskSucceeded || st.Workspace != nil {
		t.Fatalf("a task without push: %s %+v", st.Phase, st.Workspace)
	}
}
