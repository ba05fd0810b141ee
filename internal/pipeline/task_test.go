package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// readyWorld is a task world whose workspace is bound.
func readyWorld(intents ...v1.ToolIntent) TaskWorld {
	return TaskWorld{WorkspaceReady: true, Intents: intents}
}

// cond is a condition as the tables state it: type, status and reason.
type cond struct {
	Status metav1.ConditionStatus
	Reason string
}

// running is the Succeeded and Failed conditions of a task that has not finished.
func running(ready, awaiting cond) map[string]cond {
	return map[string]cond{
		v1.ConditionReady:            ready,
		v1.ConditionAwaitingApproval: awaiting,
		v1.ConditionSucceeded:        {metav1.ConditionFalse, v1.ReasonRunning},
		v1.ConditionFailed:           {metav1.ConditionFalse, v1.ReasonRunning},
	}
}

var (
	isReady   = cond{metav1.ConditionTrue, v1.ReasonWorkspaceReady}
	notReady  = cond{metav1.ConditionFalse, v1.ReasonWorkspacePending}
	noneWaits = cond{metav1.ConditionFalse, v1.ReasonNoPendingApprovals}
	someWait  = cond{metav1.ConditionTrue, v1.ReasonIntentsAwaitingApproval}
)

// ended is the conditions of a task that finished with that condition and reason: the
// other terminal condition is gone.
func ended(typ, reason string, awaiting cond) map[string]cond {
	return map[string]cond{
		v1.ConditionReady:            isReady,
		v1.ConditionAwaitingApproval: awaiting,
		typ:                          {metav1.ConditionTrue, reason},
	}
}

// conds is the conditions of a status as the tables state them, without Archived,
// which says what the controller's archive does, not the task (retention_test.go).
func conds(cs []metav1.Condition) map[string]cond {
	out := map[string]cond{}
	for _, c := range cs {
		if c.Type == v1.ConditionArchived {
			continue
		}
		out[c.Type] = cond{c.Status, c.Reason}
	}
	return out
}

func refused(name string, turn int32) v1.ToolIntent {
	return makeIntent(name).turn(turn).observed(v1.OutcomeValidationFailed).val()
}

func TestTaskStatus(t *testing.T) {
	now := metav1.NewTime(epoch)
	cases := []struct {
		name       string
		task       *v1.AgentTask
		world      TaskWorld
		wantPhase  v1.TaskPhase
		wantConds  map[string]cond
		wantCounts v1.IntentCounts
		wantTurn   int32
	}{
		{
			name:      "new task, workspace not bound yet",
			task:      makeTask(testTask).obj(),
			world:     TaskWorld{WorkspaceMessage: "claim t-workspace is Pending"},
			wantPhase: v1.TaskPending,
			wantConds: running(notReady, noneWaits),
		},
		{
			name:      "workspace bound, no intents",
			task:      makeTask(testTask).obj(),
			world:     readyWorld(),
			wantPhase: v1.TaskRunning,
			wantConds: running(isReady, noneWaits),
		},
		{
			name: "counts by outcome, in flight and the latest turn",
			task: makeTask(testTask).obj(),
			world: readyWorld(
				makeIntent("t-t0-0").observed(v1.OutcomeSucceeded).val(),
				makeIntent("t-t0-1").index(1).observed(v1.OutcomeSucceeded).val(),
				makeIntent("t-t1-0").turn(1).observed(v1.OutcomeFailed).val(),
				makeIntent("t-t1-1").turn(1).index(1).observed(v1.OutcomeDenied).val(),
				makeIntent("t-t3-0").turn(3).decided(v1.DecisionAllow).executing().val(),
				makeIntent("t-t3-1").turn(3).index(1).val(),
			),
			wantPhase: v1.TaskRunning,
			wantConds: running(isReady, noneWaits),
			wantCounts: v1.IntentCounts{Total: 6, InFlight: 2, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{
				v1.OutcomeSucceeded: 2, v1.OutcomeFailed: 1, v1.OutcomeDenied: 1,
			})},
			wantTurn: 3,
		},
		{
			name:       "an Ask waiting for a human",
			task:       makeTask(testTask).obj(),
			world:      readyWorld(makeIntent("t-t0-0").decided(v1.DecisionAsk).val()),
			wantPhase:  v1.TaskAwaitingApproval,
			wantConds:  running(isReady, someWait),
			wantCounts: v1.IntentCounts{Total: 1, InFlight: 1},
		},
		{
			name:       "an approved Ask no longer waits",
			task:       makeTask(testTask).obj(),
			world:      readyWorld(makeIntent("t-t0-0").decided(v1.DecisionAsk).approved().val()),
			wantPhase:  v1.TaskRunning,
			wantConds:  running(isReady, noneWaits),
			wantCounts: v1.IntentCounts{Total: 1, InFlight: 1},
		},
		{
			name:       "a missing workspace comes before waiting in the phase",
			task:       makeTask(testTask).obj(),
			world:      TaskWorld{Intents: []v1.ToolIntent{makeIntent("t-t0-0").decided(v1.DecisionAsk).val()}},
			wantPhase:  v1.TaskPending,
			wantConds:  running(notReady, someWait),
			wantCounts: v1.IntentCounts{Total: 1, InFlight: 1},
		},
		{
			name:       "consecutive refusals reach the budget",
			task:       makeTask(testTask).budgets(v1.Budgets{MaxConsecutiveRefusals: 3}).obj(),
			world:      readyWorld(makeIntent("t-t0-0").observed(v1.OutcomeSucceeded).val(), refused("t-t1-0", 1), makeIntent("t-t2-0").turn(2).observed(v1.OutcomeDenied).val(), refused("t-t3-0", 3)),
			wantPhase:  v1.TaskFailed,
			wantConds:  ended(v1.ConditionFailed, v1.ReasonRefusalBudgetExhausted, noneWaits),
			wantCounts: v1.IntentCounts{Total: 4, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeSucceeded: 1, v1.OutcomeValidationFailed: 2, v1.OutcomeDenied: 1})},
			wantTurn:   3,
		},
		{
			name:       "one refusal short of the budget",
			task:       makeTask(testTask).budgets(v1.Budgets{MaxConsecutiveRefusals: 3}).obj(),
			world:      readyWorld(refused("t-t0-0", 0), refused("t-t1-0", 1)),
			wantPhase:  v1.TaskRunning,
			wantConds:  running(isReady, noneWaits),
			wantCounts: v1.IntentCounts{Total: 2, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeValidationFailed: 2})},
			wantTurn:   1,
		},
		{
			name: "a call that ran resets the refusal count, a failing one too",
			task: makeTask(testTask).budgets(v1.Budgets{MaxConsecutiveRefusals: 3}).obj(),
			world: readyWorld(refused("t-t0-0", 0), refused("t-t1-0", 1),
				makeIntent("t-t2-0").turn(2).observed(v1.OutcomeFailed).val(),
				refused("t-t3-0", 3), refused("t-t4-0", 4)),
			wantPhase:  v1.TaskRunning,
			wantConds:  running(isReady, noneWaits),
			wantCounts: v1.IntentCounts{Total: 5, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeValidationFailed: 4, v1.OutcomeFailed: 1})},
			wantTurn:   4,
		},
		{
			name: "a human's denial is not the agent's refusal and resets the count",
			task: makeTask(testTask).budgets(v1.Budgets{MaxConsecutiveRefusals: 2}).obj(),
			world: readyWorld(refused("t-t0-0", 0),
				makeIntent("t-t1-0").turn(1).decided(v1.DecisionAsk).observed(v1.OutcomeApprovalDenied).val(),
				refused("t-t2-0", 2)),
			wantPhase:  v1.TaskRunning,
			wantConds:  running(isReady, noneWaits),
			wantCounts: v1.IntentCounts{Total: 3, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeValidationFailed: 2, v1.OutcomeApprovalDenied: 1})},
			wantTurn:   2,
		},
		{
			// Created in the order success, refusal, refusal, refusal would end on three
			// refusals; by turn the success came last.
			name: "refusals are ordered by turn, not by creation",
			task: makeTask(testTask).budgets(v1.Budgets{MaxConsecutiveRefusals: 3}).obj(),
			world: readyWorld(
				makeIntent("t-t3-0").turn(3).observed(v1.OutcomeSucceeded).created(epoch.Add(-time.Hour)).val(),
				makeIntent("t-t0-0").turn(0).observed(v1.OutcomeDenied).created(epoch.Add(-time.Minute)).val(),
				makeIntent("t-t1-0").turn(1).observed(v1.OutcomeDenied).created(epoch.Add(-time.Minute)).val(),
				makeIntent("t-t2-0").turn(2).observed(v1.OutcomeDenied).created(epoch.Add(-time.Minute)).val(),
			),
			wantPhase:  v1.TaskRunning,
			wantConds:  running(isReady, noneWaits),
			wantCounts: v1.IntentCounts{Total: 4, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeSucceeded: 1, v1.OutcomeDenied: 3})},
			wantTurn:   3,
		},
		{
			name: "refusals are ordered by index within a turn, not by creation",
			task: makeTask(testTask).budgets(v1.Budgets{MaxConsecutiveRefusals: 1}).obj(),
			world: readyWorld(
				makeIntent("t-t0-1").index(1).observed(v1.OutcomeDenied).created(epoch.Add(-time.Hour)).val(),
				makeIntent("t-t0-0").index(0).observed(v1.OutcomeSucceeded).created(epoch).val(),
			),
			wantPhase:  v1.TaskFailed,
			wantConds:  ended(v1.ConditionFailed, v1.ReasonRefusalBudgetExhausted, noneWaits),
			wantCounts: v1.IntentCounts{Total: 2, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeSucceeded: 1, v1.OutcomeDenied: 1})},
		},
		{
			name:       "intent budget spent with nothing in flight",
			task:       makeTask(testTask).budgets(v1.Budgets{MaxIntents: 2}).obj(),
			world:      readyWorld(makeIntent("t-t0-0").observed(v1.OutcomeSucceeded).val(), makeIntent("t-t1-0").turn(1).observed(v1.OutcomeSucceeded).val()),
			wantPhase:  v1.TaskFailed,
			wantConds:  ended(v1.ConditionFailed, v1.ReasonIntentBudgetExhausted, noneWaits),
			wantCounts: v1.IntentCounts{Total: 2, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeSucceeded: 2})},
			wantTurn:   1,
		},
		{
			name:       "intent budget spent but the last call is still in flight",
			task:       makeTask(testTask).budgets(v1.Budgets{MaxIntents: 2}).obj(),
			world:      readyWorld(makeIntent("t-t0-0").observed(v1.OutcomeSucceeded).val(), makeIntent("t-t1-0").turn(1).decided(v1.DecisionAllow).executing().val()),
			wantPhase:  v1.TaskRunning,
			wantConds:  running(isReady, noneWaits),
			wantCounts: v1.IntentCounts{Total: 2, InFlight: 1, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeSucceeded: 1})},
			wantTurn:   1,
		},
		{
			name:      "token budget reached",
			task:      makeTask(testTask).budgets(v1.Budgets{MaxTokens: ptr[int64](1000)}).tokensUsed(1000).obj(),
			world:     readyWorld(),
			wantPhase: v1.TaskFailed,
			wantConds: ended(v1.ConditionFailed, v1.ReasonTokenBudgetExhausted, noneWaits),
		},
		{
			name:      "token budget not yet reached",
			task:      makeTask(testTask).budgets(v1.Budgets{MaxTokens: ptr[int64](1000)}).tokensUsed(999).obj(),
			world:     readyWorld(),
			wantPhase: v1.TaskRunning,
			wantConds: running(isReady, noneWaits),
		},
		{
			name:       "external agent marked done with nothing in flight",
			task:       makeTask(testTask).external().done().obj(),
			world:      readyWorld(makeIntent("t-t0-0").observed(v1.OutcomeSucceeded).val()),
			wantPhase:  v1.TaskSucceeded,
			wantConds:  ended(v1.ConditionSucceeded, v1.ReasonMarkedDone, noneWaits),
			wantCounts: v1.IntentCounts{Total: 1, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeSucceeded: 1})},
		},
		{
			name:       "external agent marked done while a call is in flight",
			task:       makeTask(testTask).external().done().obj(),
			world:      readyWorld(makeIntent("t-t0-0").decided(v1.DecisionAsk).val()),
			wantPhase:  v1.TaskAwaitingApproval,
			wantConds:  running(isReady, someWait),
			wantCounts: v1.IntentCounts{Total: 1, InFlight: 1},
		},
		{
			name:      "done is not for a model-driven task",
			task:      makeTask(testTask).done().obj(),
			world:     readyWorld(),
			wantPhase: v1.TaskRunning,
			wantConds: running(isReady, noneWaits),
		},
		{
			name:       "cancel fails the task even with a call in flight, before any budget",
			task:       makeTask(testTask).external().done().cancel().budgets(v1.Budgets{MaxIntents: 1, MaxConsecutiveRefusals: 1}).obj(),
			world:      readyWorld(refused("t-t0-0", 0), makeIntent("t-t1-0").turn(1).decided(v1.DecisionAsk).val()),
			wantPhase:  v1.TaskFailed,
			wantConds:  ended(v1.ConditionFailed, v1.ReasonCancelled, someWait),
			wantCounts: v1.IntentCounts{Total: 2, InFlight: 1, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeValidationFailed: 1})},
			wantTurn:   1,
		},
		{
			name: "a running task that is cancelled keeps no Succeeded=False/Running",
			task: makeTask(testTask).cancel().
				condition(v1.ConditionSucceeded, metav1.ConditionFalse, v1.ReasonRunning, epoch.Add(-time.Hour)).
				condition(v1.ConditionFailed, metav1.ConditionFalse, v1.ReasonRunning, epoch.Add(-time.Hour)).obj(),
			world:     readyWorld(),
			wantPhase: v1.TaskFailed,
			wantConds: ended(v1.ConditionFailed, v1.ReasonCancelled, noneWaits),
		},
		{
			name: "a succeeded task stays succeeded, whatever happens after",
			task: makeTask(testTask).cancel().budgets(v1.Budgets{MaxTokens: ptr[int64](1)}).tokensUsed(5).
				condition(v1.ConditionSucceeded, metav1.ConditionTrue, v1.ReasonMarkedDone, epoch.Add(-time.Hour)).
				condition(v1.ConditionFailed, metav1.ConditionFalse, v1.ReasonRunning, epoch.Add(-2*time.Hour)).obj(),
			world:     readyWorld(),
			wantPhase: v1.TaskSucceeded,
			wantConds: ended(v1.ConditionSucceeded, v1.ReasonMarkedDone, noneWaits),
		},
		{
			name: "a failed task stays failed for its first reason",
			task: makeTask(testTask).cancel().
				condition(v1.ConditionFailed, metav1.ConditionTrue, v1.ReasonIntentBudgetExhausted, epoch.Add(-time.Hour)).obj(),
			world:     readyWorld(),
			wantPhase: v1.TaskFailed,
			wantConds: map[string]cond{
				v1.ConditionReady:            isReady,
				v1.ConditionAwaitingApproval: noneWaits,
				v1.ConditionFailed:           {metav1.ConditionTrue, v1.ReasonIntentBudgetExhausted},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := TaskStatus(tc.task, tc.world, now)
			if got.Phase != tc.wantPhase {
				t.Errorf("phase = %s, want %s", got.Phase, tc.wantPhase)
			}
			if diff := cmp.Diff(tc.wantConds, conds(got.Conditions)); diff != "" {
				t.Errorf("conditions mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCounts, got.Intents, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("intent counts mismatch (-want +got):\n%s", diff)
			}
			if got.Turn != tc.wantTurn {
				t.Errorf("turn = %d, want %d", got.Turn, tc.wantTurn)
			}
			if got.ObservedGeneration != tc.task.Generation {
				t.Errorf("observedGeneration = %d, want %d", got.ObservedGeneration, tc.task.Generation)
			}
		})
	}
}

// The whole status of one reconcile, messages included, and what a second reconcile of
// an unchanged world leaves alone.
func TestTaskStatusWhole(t *testing.T) {
	t0 := metav1.NewTime(epoch)
	task := makeTask(testTask).budgets(v1.Budgets{MaxIntents: 10}).obj()
	task.Generation = 3
	task.Status.TokensUsed = 1234
	task.Status.Result = "earlier result"
	world := TaskWorld{
		WorkspaceReady: true,
		Approvals:      2,
		Intents: []v1.ToolIntent{
			makeIntent("t-t0-0").observed(v1.OutcomeSucceeded).val(),
			makeIntent("t-t1-0").turn(1).decided(v1.DecisionAsk).val(),
			makeIntent("t-t1-1").turn(1).index(1).decided(v1.DecisionAsk).val(),
		},
	}
	want := v1.AgentTaskStatus{
		Conditions: []metav1.Condition{
			{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonWorkspaceReady, Message: "workspace claim t-workspace is bound to the task", ObservedGeneration: 3, LastTransitionTime: t0},
			{Type: v1.ConditionAwaitingApproval, Status: metav1.ConditionTrue, Reason: v1.ReasonIntentsAwaitingApproval, Message: "waiting for a human decision on [t-t1-0 t-t1-1]", ObservedGeneration: 3, LastTransitionTime: t0},
			{Type: v1.ConditionSucceeded, Status: metav1.ConditionFalse, Reason: v1.ReasonRunning, Message: "the task has not finished", ObservedGeneration: 3, LastTransitionTime: t0},
			{Type: v1.ConditionFailed, Status: metav1.ConditionFalse, Reason: v1.ReasonRunning, Message: "the task has not failed", ObservedGeneration: 3, LastTransitionTime: t0},
			{Type: v1.ConditionArchived, Status: metav1.ConditionFalse, Reason: v1.ReasonNoArchive, Message: "no archive is configured (the controller's --archive-dsn-file): the task's finished calls stay in etcd, and history grows there", ObservedGeneration: 3, LastTransitionTime: t0},
		},
		ObservedGeneration: 3,
		Phase:              v1.TaskAwaitingApproval,
		AgentKind:          v1.AgentKindExternal,
		Turn:               1,
		WorkspaceClaimName: "t-workspace",
		Intents:            v1.IntentCounts{Total: 3, InFlight: 2, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeSucceeded: 1})},
		ApprovalRequests:   2,
		TokensUsed:         1234,
		Result:             "earlier result",
	}
	first := TaskStatus(task, world, t0)
	if diff := cmp.Diff(want, first); diff != "" {
		t.Fatalf("first status mismatch (-want +got):\n%s", diff)
	}

	// Nothing changed an hour later: the status is identical, no time moved.
	task.Status = first
	later := metav1.NewTime(epoch.Add(time.Hour))
	if diff := cmp.Diff(first, TaskStatus(task, world, later)); diff != "" {
		t.Errorf("an unchanged world changed the status (-before +after):\n%s", diff)
	}

	// One flip moves only that condition's time.
	world.Intents[1] = makeIntent("t-t1-0").turn(1).decided(v1.DecisionAsk).approved().val()
	world.Intents[2] = makeIntent("t-t1-1").turn(1).index(1).decided(v1.DecisionAsk).observed(v1.OutcomeApprovalDenied).val()
	got := TaskStatus(task, world, later)
	want = *first.DeepCopy()
	want.Conditions[1] = metav1.Condition{Type: v1.ConditionAwaitingApproval, Status: metav1.ConditionFalse, Reason: v1.ReasonNoPendingApprovals, Message: "no intent waits for a human", ObservedGeneration: 3, LastTransitionTime: later}
	want.Phase = v1.TaskRunning
	want.Intents = v1.IntentCounts{Total: 3, InFlight: 1, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{v1.OutcomeSucceeded: 1, v1.OutcomeApprovalDenied: 1})}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status after the approvals mismatch (-want +got):\n%s", diff)
	}
}

// A finished task's terminal condition is carried over as it was, message and time,
// not recomputed from a world that would now say something else.
func TestTaskStatusFinishedIsCarriedOver(t *testing.T) {
	failedAt := metav1.NewTime(epoch.Add(-time.Hour))
	terminal := metav1.Condition{
		Type: v1.ConditionFailed, Status: metav1.ConditionTrue, Reason: v1.ReasonRefusalBudgetExhausted,
		Message: "3 intents in a row were refused", ObservedGeneration: 1, LastTransitionTime: failedAt,
	}
	task := makeTask(testTask).budgets(v1.Budgets{MaxIntents: 1}).obj()
	task.Status.Conditions = []metav1.Condition{terminal}
	task.Status.Result = "gave up"
	// The world now also spends the intent budget; the reason must stay the first one.
	world := readyWorld(makeIntent("t-t0-0").observed(v1.OutcomeSucceeded).val())

	got := TaskStatus(task, world, metav1.NewTime(epoch))
	var found *metav1.Condition
	for i := range got.Conditions {
		if got.Conditions[i].Type == v1.ConditionFailed {
			found = &got.Conditions[i]
		}
	}
	if diff := cmp.Diff(&terminal, found); diff != "" {
		t.Errorf("terminal condition changed (-want +got):\n%s", diff)
	}
	if got.Phase != v1.TaskFailed || got.Result != "gave up" {
		t.Errorf("phase, result = %s, %q; want Failed, \"gave up\"", got.Phase, got.Result)
	}
}

func TestTaskStatusMessages(t *testing.T) {
	now := metav1.NewTime(epoch)
	cases := []struct {
		name  string
		task  *v1.AgentTask
		world TaskWorld
		typ   string
		want  string
	}{
		{name: "workspace pending", task: makeTask(testTask).obj(), world: TaskWorld{WorkspaceMessage: "claim t-workspace is Pending"}, typ: v1.ConditionReady, want: "claim t-workspace is Pending"},
		{name: "existing claim", task: makeTask(testTask).existingClaim("src").obj(), world: readyWorld(), typ: v1.ConditionReady, want: "workspace claim src is bound to the task"},
		{name: "refusals", task: makeTask(testTask).budgets(v1.Budgets{MaxConsecutiveRefusals: 2}).obj(), world: readyWorld(refused("a", 0), refused("b", 1)), typ: v1.ConditionFailed,
			want: "2 intents in a row were refused (validation failures or denials), budgets.maxConsecutiveRefusals=2"},
		{name: "intents", task: makeTask(testTask).budgets(v1.Budgets{MaxIntents: 1}).obj(), world: readyWorld(refused("a", 0)), typ: v1.ConditionFailed, want: "the task used all 1 intents of budgets.maxIntents"},
		{name: "tokens", task: makeTask(testTask).budgets(v1.Budgets{MaxTokens: ptr[int64](10)}).tokensUsed(12).obj(), world: readyWorld(), typ: v1.ConditionFailed, want: "the model used 12 tokens, budgets.maxTokens=10"},
		{name: "cancel", task: makeTask(testTask).cancel().obj(), world: readyWorld(), typ: v1.ConditionFailed, want: "spec.lifecycle Cancelled"},
		{name: "done", task: makeTask(testTask).external().done().obj(), world: readyWorld(), typ: v1.ConditionSucceeded, want: "marked it done (spec.lifecycle Done)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := TaskStatus(tc.task, tc.world, now)
			for _, c := range got.Conditions {
				if c.Type == tc.typ {
					if !strings.Contains(c.Message, tc.want) {
						t.Errorf("%s message = %q, want it to contain %q", tc.typ, c.Message, tc.want)
					}
					return
				}
			}
			t.Errorf("no %s condition in %v", tc.typ, got.Conditions)
		})
	}
}

func TestIntentBefore(t *testing.T) {
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	cases := []struct {
		name string
		a, b *v1.ToolIntent
		want bool
	}{
		{name: "earlier turn first", a: makeIntent("z").turn(0).created(at(time.Hour)).obj(), b: makeIntent("a").turn(1).obj(), want: true},
		{name: "later turn after", a: makeIntent("a").turn(2).obj(), b: makeIntent("z").turn(1).created(at(time.Hour)).obj(), want: false},
		{name: "same turn, lower index first", a: makeIntent("z").turn(1).index(0).created(at(time.Hour)).obj(), b: makeIntent("a").turn(1).index(1).obj(), want: true},
		{name: "same turn and index, older first", a: makeIntent("z").created(at(0)).obj(), b: makeIntent("a").created(at(time.Second)).obj(), want: true},
		{name: "all equal, name decides", a: makeIntent("a").obj(), b: makeIntent("b").obj(), want: true},
		{name: "not before itself", a: makeIntent("a").obj(), b: makeIntent("a").obj(), want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IntentBefore(tc.a, tc.b); got != tc.want {
				t.Errorf("IntentBefore() = %v, want %v", got, tc.want)
			}
		})
	}
}

// status.agentKind says which of spec.agent's two the task has, for kubectl get's
// Agent column.
func TestTaskStatusNamesTheAgentKind(t *testing.T) {
	for _, tc := range []struct {
		task *v1.AgentTask
		want v1.AgentKind
	}{
		{makeTask(testTask).obj(), v1.AgentKindExternal},
		{makeTask(testTask).model().obj(), v1.AgentKindModel},
	} {
		if got := TaskStatus(tc.task, readyWorld(), metav1.Now()).AgentKind; got != tc.want {
			t.Errorf("agentKind %q, want %q", got, tc.want)
		}
	}
}
