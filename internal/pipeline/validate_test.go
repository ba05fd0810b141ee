package pipeline

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
)

func TestValidate(t *testing.T) {
	readme := Baseline{SHA256: "sha-readme", Intent: "t-t0-0"}
	baselines := map[string]Baseline{"README.md": readme, "pkg/a.go": {SHA256: "sha-a", Intent: "t-t1-2"}}
	cases := []struct {
		name      string
		intent    *v1.ToolIntent
		task      *v1.AgentTask // nil: the task does not exist
		earlier   int
		baselines map[string]Baseline
		// want is compared whole, except Normalized, which wantNormalized checks.
		want           Validation
		wantNormalized string
	}{
		{
			name:           "valid read in Edit mode with defaults",
			intent:         makeIntent("i").tool(v1.ToolReadFile).input(`{ "path" : "./src/../README.md" }`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"./src/../README.md"}`,
		},
		{
			name:   "schema errors carry the input prefix and the JSON path",
			intent: makeIntent("i").tool(v1.ToolBash).input(`{"timeoutMs":0,"extra":1}`).obj(),
			task:   makeTask(testTask).external().obj(),
			want: Validation{Errors: []string{
				"input/command: is required",
				"input/extra: unknown property; remove it",
				"input/timeoutMs: must be >= 1 (got 0)",
			}},
		},
		{
			name:   "input that is not JSON",
			intent: makeIntent("i").input(`{"path":`).obj(),
			task:   makeTask(testTask).external().obj(),
			want:   Validation{Errors: []string{"input/: input is not valid JSON: unexpected EOF"}},
		},
		{
			name:   "unknown tool is a schema error and not also a visibility error",
			intent: makeIntent("i").tool("rm_rf").input(`{}`).obj(),
			task:   makeTask(testTask).external().obj(),
			want: Validation{Errors: []string{
				`input/: unknown tool "rm_rf"; the tools are bash, edit_file, glob, grep, job_kill, job_list, job_output, list_dir, read_file, write_file`,
			}},
		},
		{
			name:   "missing task stops validation after the schema",
			intent: makeIntent("i").task("gone").input(`{"path":"/etc/passwd"}`).obj(),
			want:   Validation{Errors: []string{`spec.taskRef: AgentTask "gone" does not exist in this namespace`}},
			// the schema passed, so the input is normalized; the path is not checked
			// without a task.
			wantNormalized: `{"path":"/etc/passwd"}`,
		},
		{
			name:           "succeeded task accepts no more intents",
			intent:         makeIntent("i").obj(),
			task:           makeTask(testTask).external().condition(v1.ConditionSucceeded, metav1.ConditionTrue, v1.ReasonMarkedDone, epoch).obj(),
			want:           Validation{Errors: []string{`spec.taskRef: AgentTask "t" accepts no more intents: it Succeeded`}, Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"README.md"}`,
		},
		{
			name:           "failed task names the reason",
			intent:         makeIntent("i").obj(),
			task:           makeTask(testTask).external().condition(v1.ConditionFailed, metav1.ConditionTrue, v1.ReasonTokenBudgetExhausted, epoch).obj(),
			want:           Validation{Errors: []string{`spec.taskRef: AgentTask "t" accepts no more intents: it Failed (TokenBudgetExhausted)`}, Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"README.md"}`,
		},
		{
			name:           "cancelled task, before its status says so",
			intent:         makeIntent("i").obj(),
			task:           makeTask(testTask).external().cancel().obj(),
			want:           Validation{Errors: []string{`spec.taskRef: AgentTask "t" accepts no more intents: it was cancelled`}, Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"README.md"}`,
		},
		{
			name:   "a task being deleted, before any status says so",
			intent: makeIntent("i").obj(),
			task: func() *v1.AgentTask {
				task := makeTask(testTask).external().obj()
				task.DeletionTimestamp = &metav1.Time{Time: epoch}
				return task
			}(),
			want:           Validation{Errors: []string{`spec.taskRef: AgentTask "t" accepts no more intents: it is being deleted`}, Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"README.md"}`,
		},
		{
			name:           "a False Succeeded condition is not finished",
			intent:         makeIntent("i").obj(),
			task:           makeTask(testTask).external().condition(v1.ConditionSucceeded, metav1.ConditionFalse, v1.ReasonRunning, epoch).condition(v1.ConditionFailed, metav1.ConditionFalse, v1.ReasonRunning, epoch).obj(),
			want:           Validation{Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"README.md"}`,
		},
		{
			name:           "ReadOnly mode hides write_file",
			intent:         makeIntent("i").tool(v1.ToolWriteFile).input(`{"path":"new.txt","content":"x"}`).obj(),
			task:           makeTask(testTask).external().mode(v1.ModeReadOnly).obj(),
			want:           Validation{Errors: []string{`spec.tool: "write_file" is not available to this task (mode ReadOnly)`}, Path: "new.txt", TimeoutSeconds: 120, Baseline: Baseline{SHA256: protocol.BaselineAbsent}},
			wantNormalized: `{"content":"x","path":"new.txt"}`,
		},
		{
			name:           "ReadOnly mode hides edit_file",
			intent:         makeIntent("i").tool(v1.ToolEditFile).input(`{"path":"README.md","oldText":"a","newText":"b"}`).obj(),
			task:           makeTask(testTask).external().mode(v1.ModeReadOnly).obj(),
			baselines:      baselines,
			want:           Validation{Errors: []string{`spec.tool: "edit_file" is not available to this task (mode ReadOnly)`}, Path: "README.md", TimeoutSeconds: 120, Baseline: readme},
			wantNormalized: `{"newText":"b","oldText":"a","path":"README.md"}`,
		},
		{
			name:           "an unset mode is ReadOnly and says so",
			intent:         makeIntent("i").tool(v1.ToolWriteFile).input(`{"path":"new.txt","content":"x"}`).obj(),
			task:           makeTask(testTask).external().mode("").obj(),
			want:           Validation{Errors: []string{`spec.tool: "write_file" is not available to this task (mode ReadOnly)`}, Path: "new.txt", TimeoutSeconds: 120, Baseline: Baseline{SHA256: protocol.BaselineAbsent}},
			wantNormalized: `{"content":"x","path":"new.txt"}`,
		},
		{
			name:           "bash is visible in ReadOnly mode (policy is the ceiling there)",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"git log"}`).obj(),
			task:           makeTask(testTask).external().mode(v1.ModeReadOnly).obj(),
			want:           Validation{TimeoutSeconds: 120},
			wantNormalized: `{"command":"git log"}`,
		},
		{
			name:           "the allow-list hides bash and is named in the error",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"ls"}`).obj(),
			task:           makeTask(testTask).external().mode(v1.ModeAuto).tools(v1.ToolReadFile, v1.ToolGrep).obj(),
			want:           Validation{Errors: []string{`spec.tool: "bash" is not available to this task (mode Auto, tools read_file, grep)`}, TimeoutSeconds: 120},
			wantNormalized: `{"command":"ls"}`,
		},
		{
			name:           "the allow-list cannot show a tool the mode hides",
			intent:         makeIntent("i").tool(v1.ToolWriteFile).input(`{"path":"a","content":""}`).obj(),
			task:           makeTask(testTask).external().mode(v1.ModeReadOnly).tools(v1.ToolWriteFile).obj(),
			want:           Validation{Errors: []string{`spec.tool: "write_file" is not available to this task (mode ReadOnly, tools write_file)`}, Path: "a", TimeoutSeconds: 120, Baseline: Baseline{SHA256: protocol.BaselineAbsent}},
			wantNormalized: `{"content":"","path":"a"}`,
		},
		{
			name:           "external agent without requestedBy",
			intent:         makeIntent("i").requestedBy("").obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{Errors: []string{"spec.requestedBy: required"}, Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"README.md"}`,
		},
		{
			name:           "intent budget spent",
			intent:         makeIntent("i").obj(),
			task:           makeTask(testTask).external().budgets(v1.Budgets{MaxIntents: 3}).obj(),
			earlier:        3,
			want:           Validation{Errors: []string{"the task's intent budget is spent: 3 of budgets.maxIntents=3 used"}, Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"README.md"}`,
		},
		{
			name:           "the last intent of the budget is accepted",
			intent:         makeIntent("i").obj(),
			task:           makeTask(testTask).external().budgets(v1.Budgets{MaxIntents: 3}).obj(),
			earlier:        2,
			want:           Validation{Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"README.md"}`,
		},
		{
			name:           "the task's default timeout applies",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"make"}`).obj(),
			task:           makeTask(testTask).external().budgets(v1.Budgets{DefaultTimeoutSeconds: 45, MaxTimeoutSeconds: 300}).obj(),
			want:           Validation{TimeoutSeconds: 45},
			wantNormalized: `{"command":"make"}`,
		},
		{
			name:           "timeoutMs is rounded up to whole seconds",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"make","timeoutMs":1500}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{TimeoutSeconds: 2},
			wantNormalized: `{"command":"make","timeoutMs":1500}`,
		},
		{
			name:           "1 ms is 1 s, never 0",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"make","timeoutMs":1}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{TimeoutSeconds: 1},
			wantNormalized: `{"command":"make","timeoutMs":1}`,
		},
		{
			name:           "exactly the maximum is not clamped",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"make","timeoutMs":300000}`).obj(),
			task:           makeTask(testTask).external().budgets(v1.Budgets{MaxTimeoutSeconds: 300}).obj(),
			want:           Validation{TimeoutSeconds: 300},
			wantNormalized: `{"command":"make","timeoutMs":300000}`,
		},
		{
			name:           "over the maximum is clamped and says so",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"make","timeoutMs":300001}`).obj(),
			task:           makeTask(testTask).external().budgets(v1.Budgets{MaxTimeoutSeconds: 300}).obj(),
			want:           Validation{TimeoutSeconds: 300, TimeoutClamped: true},
			wantNormalized: `{"command":"make","timeoutMs":300001}`,
		},
		{
			name:           "zero budgets mean 600 s at most",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"make","timeoutMs":86400000}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{TimeoutSeconds: 600, TimeoutClamped: true},
			wantNormalized: `{"command":"make","timeoutMs":86400000}`,
		},
		{
			name:           "a default above the maximum is clamped too",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"make"}`).obj(),
			task:           makeTask(testTask).external().budgets(v1.Budgets{DefaultTimeoutSeconds: 900, MaxTimeoutSeconds: 60}).obj(),
			want:           Validation{TimeoutSeconds: 60, TimeoutClamped: true},
			wantNormalized: `{"command":"make"}`,
		},
		{
			name:           "timeoutMs of a file tool is not a field; the default applies",
			intent:         makeIntent("i").tool(v1.ToolGrep).input(`{"pattern":"x"}`).obj(),
			task:           makeTask(testTask).external().budgets(v1.Budgets{DefaultTimeoutSeconds: 10}).obj(),
			want:           Validation{TimeoutSeconds: 10},
			wantNormalized: `{"pattern":"x"}`,
		},
		{
			name:           "absolute path inside the workspace becomes relative",
			intent:         makeIntent("i").input(`{"path":"/workspace/pkg/a.go"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{Path: "pkg/a.go", TimeoutSeconds: 120},
			wantNormalized: `{"path":"/workspace/pkg/a.go"}`,
		},
		{
			name:           "absolute path outside the workspace",
			intent:         makeIntent("i").input(`{"path":"/etc/passwd"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{Errors: []string{`input/path: "/etc/passwd" is outside the workspace /workspace; use a path relative to the workspace`}, TimeoutSeconds: 120},
			wantNormalized: `{"path":"/etc/passwd"}`,
		},
		{
			name:           "relative path escaping with ..",
			intent:         makeIntent("i").tool(v1.ToolListDir).input(`{"path":"src/../../.."}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{Errors: []string{`input/path: "src/../../.." is outside the workspace through ".."; paths must stay inside it`}, TimeoutSeconds: 120},
			wantNormalized: `{"path":"src/../../.."}`,
		},
		{
			name:           "NUL byte in a path",
			intent:         makeIntent("i").input(`{"path":"a\u0000b"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{Errors: []string{"input/path: path contains a NUL byte"}, TimeoutSeconds: 120},
			wantNormalized: `{"path":"a\u0000b"}`,
		},
		{
			name:           "bash workdir is checked and not recorded as the file path",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"ls","workdir":"/root"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{Errors: []string{`input/workdir: "/root" is outside the workspace /workspace; use a path relative to the workspace`}, TimeoutSeconds: 120},
			wantNormalized: `{"command":"ls","workdir":"/root"}`,
		},
		{
			name:           "bash workdir inside the workspace",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"ls","workdir":"/workspace/pkg"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{TimeoutSeconds: 120},
			wantNormalized: `{"command":"ls","workdir":"/workspace/pkg"}`,
		},
		{
			name:           "edit_file without an earlier read is refused, naming the path",
			intent:         makeIntent("i").tool(v1.ToolEditFile).input(`{"path":"./main.go","oldText":"a","newText":"b"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			baselines:      baselines,
			want:           Validation{Errors: []string{`input/path: edit_file needs an earlier successful read_file of "main.go" in this task; read the file first`}, Path: "main.go", TimeoutSeconds: 120},
			wantNormalized: `{"newText":"b","oldText":"a","path":"./main.go"}`,
		},
		{
			name:           "edit_file carries the baseline of the cleaned path",
			intent:         makeIntent("i").tool(v1.ToolEditFile).input(`{"path":"/workspace/pkg/../pkg/a.go","oldText":"a","newText":"b"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			baselines:      baselines,
			want:           Validation{Path: "pkg/a.go", TimeoutSeconds: 120, Baseline: Baseline{SHA256: "sha-a", Intent: "t-t1-2"}},
			wantNormalized: `{"newText":"b","oldText":"a","path":"/workspace/pkg/../pkg/a.go"}`,
		},
		{
			name:           "write_file of an unread file may only create it",
			intent:         makeIntent("i").tool(v1.ToolWriteFile).input(`{"path":"new.go","content":"package x"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			baselines:      baselines,
			want:           Validation{Path: "new.go", TimeoutSeconds: 120, Baseline: Baseline{SHA256: protocol.BaselineAbsent}},
			wantNormalized: `{"content":"package x","path":"new.go"}`,
		},
		{
			name:           "write_file of a read file carries its baseline",
			intent:         makeIntent("i").tool(v1.ToolWriteFile).input(`{"path":"README.md","content":"new"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			baselines:      baselines,
			want:           Validation{Path: "README.md", TimeoutSeconds: 120, Baseline: readme},
			wantNormalized: `{"content":"new","path":"README.md"}`,
		},
		{
			name:           "read_file needs no baseline and gets none",
			intent:         makeIntent("i").input(`{"path":"README.md"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			baselines:      baselines,
			want:           Validation{Path: "README.md", TimeoutSeconds: 120},
			wantNormalized: `{"path":"README.md"}`,
		},
		{
			name:           "glob without a path is the workspace root, nothing to check",
			intent:         makeIntent("i").tool(v1.ToolGlob).input(`{"pattern":"**/*.go"}`).obj(),
			task:           makeTask(testTask).external().obj(),
			want:           Validation{TimeoutSeconds: 120},
			wantNormalized: `{"pattern":"**/*.go"}`,
		},
		{
			name:    "every problem is reported at once",
			intent:  makeIntent("i").tool(v1.ToolEditFile).input(`{"path":"../x","oldText":"a","newText":"b"}`).requestedBy("").obj(),
			task:    makeTask(testTask).mode(v1.ModeReadOnly).external().cancel().budgets(v1.Budgets{MaxIntents: 1}).obj(),
			earlier: 1,
			want: Validation{Errors: []string{
				`spec.taskRef: AgentTask "t" accepts no more intents: it was cancelled`,
				"spec.requestedBy: required",
				`spec.tool: "edit_file" is not available to this task (mode ReadOnly)`,
				"the task's intent budget is spent: 1 of budgets.maxIntents=1 used",
				`input/path: "../x" is outside the workspace through ".."; paths must stay inside it`,
			}, TimeoutSeconds: 120},
			wantNormalized: `{"newText":"b","oldText":"a","path":"../x"}`,
		},
		{
			name:           "a background job in a Session task",
			intent:         makeIntent("i").tool(v1.ToolBash).input(`{"command":"make serve","runInBackground":true}`).obj(),
			task:           makeTask(testTask).external().sandbox(v1.SandboxSpec{Isolation: v1.IsolationSession}).obj(),
			want:           Validation{TimeoutSeconds: 120},
			wantNormalized: `{"command":"make serve","runInBackground":true}`,
		},
		{
			name:   "a background job needs a session: a PerCall task refuses it, naming the field",
			intent: makeIntent("i").tool(v1.ToolBash).input(`{"command":"make serve","runInBackground":true}`).obj(),
			task:   makeTask(testTask).external().obj(),
			want: Validation{Errors: []string{
				"spec.input.runInBackground: a background job lives in a session, and AgentTask t runs each call as its own Job: set spec.sandbox.isolation: Session on the task, or run the command without runInBackground",
			}, TimeoutSeconds: 120},
			wantNormalized: `{"command":"make serve","runInBackground":true}`,
		},
		{
			name:   "the job tools are not there for a PerCall task",
			intent: makeIntent("i").tool(v1.ToolJobOutput).input(`{"job":"j"}`).obj(),
			task:   makeTask(testTask).external().obj(),
			want: Validation{Errors: []string{
				`spec.tool: "job_output" acts on background jobs, and AgentTask t has none: background jobs need spec.sandbox.isolation: Session`,
			}, TimeoutSeconds: 120},
			wantNormalized: `{"job":"j"}`,
		},
		{
			name:   "job_kill is no read-only tool",
			intent: makeIntent("i").tool(v1.ToolJobKill).input(`{"job":"j"}`).obj(),
			task:   makeTask(testTask).external().mode(v1.ModeReadOnly).sandbox(v1.SandboxSpec{Isolation: v1.IsolationSession}).obj(),
			want: Validation{Errors: []string{
				`spec.tool: "job_kill" is not available to this task (mode ReadOnly)`,
			}, TimeoutSeconds: 120},
			wantNormalized: `{"job":"j"}`,
		},
		{
			name:   "schema errors and task errors together",
			intent: makeIntent("i").tool(v1.ToolWriteFile).input(`{"path":"a"}`).obj(),
			task:   makeTask(testTask).external().mode(v1.ModeReadOnly).obj(),
			want: Validation{Errors: []string{
				"input/content: is required",
				`spec.tool: "write_file" is not available to this task (mode ReadOnly)`,
			}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Validate(ValidateInput{Intent: tc.intent, Task: tc.task, EarlierIntents: tc.earlier, Baselines: tc.baselines})
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Validation{}, "Normalized"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Validate() mismatch (-want +got):\n%s", diff)
			}
			if string(got.Normalized) != tc.wantNormalized {
				t.Errorf("Normalized = %s, want %s", got.Normalized, tc.wantNormalized)
			}
		})
	}
}

func TestValidationStatus(t *testing.T) {
	v := Validation{
		Errors:         []string{"input/path: is required"},
		Normalized:     []byte(`{}`),
		Path:           "a",
		TimeoutSeconds: 30,
		TimeoutClamped: true,
		Baseline:       Baseline{SHA256: "sha", Intent: "t-t0-0"},
	}
	want := &v1.Validation{Errors: []string{"input/path: is required"}, TimeoutSeconds: 30, TimeoutClamped: true, BaselineSHA256: "sha", BaselineIntentName: "t-t0-0"}
	if diff := cmp.Diff(want, v.Status()); diff != "" {
		t.Errorf("Status() mismatch (-want +got):\n%s", diff)
	}
}

func TestTaskFinished(t *testing.T) {
	cases := []struct {
		name    string
		task    *v1.AgentTask
		want    bool
		wantWhy string
	}{
		{name: "new", task: makeTask("t").obj()},
		{name: "running", task: makeTask("t").condition(v1.ConditionFailed, metav1.ConditionFalse, v1.ReasonRunning, epoch).obj()},
		{name: "succeeded", task: makeTask("t").condition(v1.ConditionSucceeded, metav1.ConditionTrue, v1.ReasonMarkedDone, epoch).obj(), want: true, wantWhy: "it Succeeded"},
		{name: "failed", task: makeTask("t").condition(v1.ConditionFailed, metav1.ConditionTrue, v1.ReasonCancelled, epoch).obj(), want: true, wantWhy: "it Failed (Cancelled)"},
		{name: "cancel requested", task: makeTask("t").cancel().obj(), want: true, wantWhy: "it was cancelled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why := TaskFinished(tc.task)
			if got != tc.want || why != tc.wantWhy {
				t.Errorf("TaskFinished() = %v, %q; want %v, %q", got, why, tc.want, tc.wantWhy)
			}
		})
	}
}

// TestValidateProposers: only a task's proposers propose into it. Each refusal must
// name the field, who was refused and who may propose instead.
func TestValidateProposers(t *testing.T) {
	const controller = "system:serviceaccount:toolgate-system:toolgate-controller-manager"
	proposers := v1.Proposers{Users: []string{"alice"}, Groups: []string{"team-a"}, ServiceAccounts: []v1.ServiceAccountReference{{Namespace: "ns", Name: "coding-agent"}}}
	external := makeTask("fix-tests").proposers(proposers).uid("external-uid").obj()
	otherExternal := makeTask("another-task").proposers(proposers).uid("another-uid").obj()
	recreatedExternal := makeTask("fix-tests").proposers(proposers).uid("earlier-uid").obj()
	model := makeTask("fix-tests").model().uid("task-uid").obj()
	otherModel := makeTask("fix-tests").model().uid("another-task-uid").obj()
	const notAProposer = "may not propose calls for AgentTask fix-tests; its proposers are users alice; groups team-a; service accounts ns/coding-agent (the task's owner adds you to spec.agent.external.proposers; a group counts only when the intent claims it in spec.requestedByGroups)"
	const modelOnly = "may not propose calls for AgentTask fix-tests: its agent is a model (spec.agent.model), and only toolgate's agent loop proposes calls for a model task; propose into a task whose agent.external.proposers name you"
	intent := func(who string, groups ...string) *intentBuilder {
		return makeIntent("i").task("fix-tests").requestedBy(who).requestedByGroups(groups...)
	}
	for _, tc := range []struct {
		name       string
		intent     *v1.ToolIntent
		task       *v1.AgentTask
		controller string
		want       string // "" means accepted
	}{
		{name: "a listed user", intent: intent("alice").obj(), task: external},
		{name: "a user not listed", intent: intent("mallory").obj(), task: external, want: "spec.requestedBy: mallory " + notAProposer},
		{name: "the service account's user", intent: intent("system:serviceaccount:ns:coding-agent").obj(), task: external},
		{name: "another service account of the namespace", intent: intent("system:serviceaccount:ns:coding-agent-2").obj(), task: external,
			want: "spec.requestedBy: system:serviceaccount:ns:coding-agent-2 " + notAProposer},
		{name: "the service account's name of another namespace", intent: intent("system:serviceaccount:other:coding-agent").obj(), task: external,
			want: "spec.requestedBy: system:serviceaccount:other:coding-agent " + notAProposer},
		{name: "a user named like the service account entry", intent: intent("ns/coding-agent").obj(), task: external,
			want: "spec.requestedBy: ns/coding-agent " + notAProposer},
		{name: "a member of a listed group who claims it", intent: intent("carol", "system:authenticated", "team-a").obj(), task: external},
		{name: "a listed group not claimed", intent: intent("carol").obj(), task: external, want: "spec.requestedBy: carol " + notAProposer},
		{name: "claimed groups that are not listed", intent: intent("carol", "team-b", "system:authenticated").obj(), task: external,
			want: "spec.requestedBy: carol (groups team-b, system:authenticated) " + notAProposer},
		{name: "a user named like a listed group", intent: intent("team-a").obj(), task: external, want: "spec.requestedBy: team-a " + notAProposer},
		{name: "an external task without proposers (stored before they were required)", intent: intent("alice").obj(), task: makeTask("fix-tests").proposers(v1.Proposers{}).obj(),
			want: "spec.requestedBy: alice may not propose calls for AgentTask fix-tests; its proposers are none (spec.agent.external.proposers is empty)"},
		{name: "a proposer's intent owned by its task (kubectl toolgate propose)", intent: intent("alice").ownedBy(external).obj(), task: external},
		{name: "a proposer's intent owned by another task", intent: intent("alice").ownedBy(otherExternal).obj(), task: external,
			want: "metadata.ownerReferences: ToolIntent i is controlled by AgentTask another-task (uid another-uid), not by AgentTask fix-tests (uid external-uid) that spec.taskRef names"},
		{name: "a proposer's intent owned by an earlier task of the same name", intent: intent("alice").ownedBy(recreatedExternal).obj(), task: external,
			want: "metadata.ownerReferences: ToolIntent i is controlled by AgentTask fix-tests (uid earlier-uid), not by AgentTask fix-tests (uid external-uid)"},
		{name: "the controller's own intent for a model task", intent: intent(controller).ownedBy(model).obj(), task: model, controller: controller},
		{name: "a proposer of another task into a model task", intent: intent("alice").obj(), task: model, controller: controller, want: "spec.requestedBy: alice " + modelOnly},
		{name: "an outsider who set the task as owner", intent: intent("mallory").ownedBy(model).obj(), task: model, controller: controller, want: "spec.requestedBy: mallory " + modelOnly},
		{name: "the controller's name on an intent the task does not own", intent: intent(controller).obj(), task: model, controller: controller,
			want: "metadata.ownerReferences: ToolIntent i is not owned by AgentTask fix-tests (uid task-uid); only toolgate's agent loop proposes calls for a model task, and it creates them owned by the task"},
		{name: "an intent owned by an earlier task of the same name", intent: intent(controller).ownedBy(otherModel).obj(), task: model, controller: controller,
			want: "metadata.ownerReferences: ToolIntent i is not owned by AgentTask fix-tests (uid task-uid)"},
		{name: "no controller identity known: nobody proposes for a model", intent: intent("").ownedBy(model).obj(), task: model,
			want: "spec.requestedBy: an intent without a requester " + modelOnly},
		{name: "a task with no agent at all", intent: intent("alice").obj(), task: makeTask("fix-tests").obj(),
			want: "spec.taskRef: AgentTask fix-tests names neither spec.agent.model nor spec.agent.external, so nobody may propose calls for it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Validate(ValidateInput{Intent: tc.intent, Task: tc.task, ControllerIdentity: tc.controller})
			if tc.want == "" {
				if len(got.Errors) > 0 {
					t.Fatalf("refused: %v", got.Errors)
				}
				return
			}
			if len(got.Errors) != 1 || !strings.HasPrefix(got.Errors[0], tc.want) {
				t.Fatalf("errors %q\nwant one starting with %q", got.Errors, tc.want)
			}
		})
	}
}

func TestProposersText(t *testing.T) {
	for _, tc := range []struct {
		p    v1.Proposers
		want string
	}{
		{v1.Proposers{Users: []string{"alice", "bob"}}, "users alice, bob"},
		{v1.Proposers{Groups: []string{"team-a"}, ServiceAccounts: []v1.ServiceAccountReference{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}}}, "groups team-a; service accounts ns/a, ns/b"},
		{v1.Proposers{}, "none (spec.agent.external.proposers is empty)"},
	} {
		if got := ProposersText(tc.p); got != tc.want {
			t.Errorf("ProposersText(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}
