package pipeline

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// done is an intent observed with outcome at, as the reconciler records it.
func done(name string, turn, index int32, o v1.Outcome, at time.Time) v1.ToolIntent {
	in := makeIntent(name).turn(turn).index(index).decided(v1.DecisionAllow).observed(o).val()
	in.UID = types.UID("uid-" + name)
	t := metav1.NewTime(at)
	in.Status.Observation.ObservedAt = &t
	in.Status.Conditions = []metav1.Condition{{Type: v1.ConditionObserved, Status: metav1.ConditionTrue, Reason: "Observed"}}
	return in
}

// Calls retire by whole turns, in order, once every call of the turn is observed
// and past the window, and a later turn has started; a model task's stay until it
// ended; the push intent stays while the task runs.
func TestRetirableCalls(t *testing.T) {
	now := epoch.Add(2 * time.Hour)
	old, recent := epoch, now.Add(-10*time.Minute)
	running := makeTask("t").obj()
	ended := makeTask("t").obj()
	ended.Status.Conditions = []metav1.Condition{{Type: v1.ConditionFailed, Status: metav1.ConditionTrue, Reason: v1.ReasonCancelled}}
	model := makeTask("t").model().obj()
	inFlight := makeIntent("t-t1-1").turn(1).index(1).val()
	cases := []struct {
		name     string
		task     *v1.AgentTask
		intents  []v1.ToolIntent
		push     string
		want     []string
		wantWait time.Duration
	}{
		{name: "the latest turn stays while the task runs", task: running,
			intents: []v1.ToolIntent{done("t-t0-0", 0, 0, v1.OutcomeSucceeded, old), done("t-t0-1", 0, 1, v1.OutcomeDenied, old), done("t-t1-0", 1, 0, v1.OutcomeSucceeded, old)},
			want:    []string{"t-t0-0", "t-t0-1"}},
		{name: "a turn with a call inside its window waits, and so does every later turn", task: running,
			intents:  []v1.ToolIntent{done("t-t0-0", 0, 0, v1.OutcomeSucceeded, old), done("t-t0-1", 0, 1, v1.OutcomeSucceeded, recent), done("t-t1-0", 1, 0, v1.OutcomeSucceeded, old), done("t-t2-0", 2, 0, v1.OutcomeSucceeded, old)},
			want:     []string{},
			wantWait: 50 * time.Minute},
		{name: "a turn with a call in flight stays, and so does every later turn", task: running,
			intents: []v1.ToolIntent{done("t-t0-0", 0, 0, v1.OutcomeSucceeded, old), done("t-t1-0", 1, 0, v1.OutcomeSucceeded, old), inFlight, done("t-t2-0", 2, 0, v1.OutcomeSucceeded, old)},
			want:    []string{"t-t0-0"}},
		{name: "an ended task's calls all retire", task: ended,
			intents: []v1.ToolIntent{done("t-t0-0", 0, 0, v1.OutcomeSucceeded, old), done("t-t1-0", 1, 0, v1.OutcomeSucceeded, old)},
			want:    []string{"t-t0-0", "t-t1-0"}},
		{name: "a running model task keeps its calls (the conversation is rebuilt from them)", task: model,
			intents: []v1.ToolIntent{done("t-t0-0", 0, 0, v1.OutcomeSucceeded, old), done("t-t1-0", 1, 0, v1.OutcomeSucceeded, old)},
			want:    []string{}},
		{name: "the push intent's turn stays while the task runs", task: running, push: "t-t0-0",
			intents: []v1.ToolIntent{done("t-t0-0", 0, 0, v1.OutcomeSucceeded, old), done("t-t1-0", 1, 0, v1.OutcomeSucceeded, old), done("t-t2-0", 2, 0, v1.OutcomeSucceeded, old)},
			want:    []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, wait := RetirableCalls(tc.task, tc.intents, tc.push, time.Hour, now)
			if diff := cmp.Diff(tc.want, names(got), cmpopts.EquateEmpty()); diff != "" || wait != tc.wantWait {
				t.Fatalf("retirable (-want +got):\n%s\nwait %s, want %s", diff, wait, tc.wantWait)
			}
		})
	}
}

// What a retired call adds to the history is what the task's status and its
// later calls would have read from it: counts, the turn, the refusals in a row,
// rule fires, file baselines, approvals, and what a human denied.
func TestRetireKeepsWhatLaterCallsNeed(t *testing.T) {
	at := epoch
	redirect := v1.PolicyRuleReference{Kind: "ToolPolicy", Name: "p", Rule: "slow-down", Generation: 1}
	asked := done("t-t0-0", 0, 0, v1.OutcomeApprovalDenied, at)
	asked.Status.Decision.Action, asked.Status.ApprovalName = v1.DecisionAsk, "t-t0-0"
	redirected := done("t-t0-1", 0, 1, v1.OutcomeRedirected, at)
	redirected.Status.Decision = &v1.Decision{Action: v1.DecisionRedirect, PolicyRuleRef: redirect, Fingerprint: "fp-r"}
	read := done("t-t1-0", 1, 0, v1.OutcomeSucceeded, at)
	read.Spec.Tool, read.Spec.Input.Raw = v1.ToolReadFile, []byte(`{"path":"src/main.go"}`)
	read.Status.Observation.ContentSHA256 = "abc"
	refused := done("t-t1-1", 1, 1, v1.OutcomeValidationFailed, at)

	h, ok := Retire(nil, "", "", []v1.ToolIntent{refused, read, redirected, asked})
	if !ok {
		t.Fatal("Retire refused")
	}
	if h.Intents.Total != 4 || h.ThroughTurn != 1 || h.ConsecutiveRefusals != 1 || h.ApprovalRequests != 1 {
		t.Fatalf("history %+v", h)
	}
	if diff := cmp.Diff([]string{"fp-t-t0-0"}, h.DeniedFingerprints); diff != "" {
		t.Fatalf("denied fingerprints (-want +got):\n%s", diff)
	}
	if len(h.RuleFires) != 1 || h.RuleFires[0].Fires != 1 || h.RuleFires[0].ID != "ToolPolicy/p/slow-down" {
		t.Fatalf("rule fires %+v", h.RuleFires)
	}
	if diff := cmp.Diff([]v1.FileBaseline{{Path: "src/main.go", SHA256: "abc", Intent: "t-t1-0"}}, h.Baselines); diff != "" {
		t.Fatalf("baselines (-want +got):\n%s", diff)
	}
	if len(h.Retiring) != 4 {
		t.Fatalf("retiring %+v", h.Retiring)
	}

	// The task's status counts them as before, and the budgets go on from them.
	task := makeTask("t").budgets(v1.Budgets{MaxIntents: 5, MaxConsecutiveRefusals: 2}).obj()
	task.Status.History = h
	later := done("t-t2-0", 2, 0, v1.OutcomeDenied, at)
	st := TaskStatus(task, TaskWorld{WorkspaceReady: true, Intents: []v1.ToolIntent{later}}, metav1.NewTime(at))
	if st.Intents.Total != 5 || st.Turn != 2 || st.ApprovalRequests != 1 || st.History == nil {
		t.Fatalf("status %+v", st)
	}
	if c := conds(st.Conditions)[v1.ConditionFailed]; c.Reason != v1.ReasonRefusalBudgetExhausted {
		t.Fatalf("two refusals in a row across retirement did not end the task: %+v", st.Conditions)
	}
	if len(st.RuleFires) != 1 || st.RuleFires[0].Fires != 1 {
		t.Fatalf("status.ruleFires %+v", st.RuleFires)
	}
	// The retiring calls, once gone from the list, leave the retiring list; while
	// listed, they are not counted twice.
	still := TaskStatus(task, TaskWorld{WorkspaceReady: true, Intents: []v1.ToolIntent{asked, later}}, metav1.NewTime(at))
	if still.Intents.Total != 5 || len(still.History.Retiring) != 1 {
		t.Fatalf("while one retiring call is listed: %+v, retiring %+v", still.Intents, still.History.Retiring)
	}

	// A denied call is not asked again, and the approval budget counts the retired.
	d := v1.Decision{Action: v1.DecisionAsk, Fingerprint: "fp-t-t0-0"}
	ApplyAskLimits(&d, 10, nil, h)
	if d.Action != v1.DecisionDeny {
		t.Fatalf("a call a human denied, retired, was asked again: %+v", d)
	}
	d = v1.Decision{Action: v1.DecisionAsk, Fingerprint: "fp-other"}
	ApplyAskLimits(&d, 1, nil, h)
	if d.Action != v1.DecisionDeny {
		t.Fatalf("the approval budget forgot the retired approval: %+v", d)
	}
	// A retired turn is closed.
	if TurnRetired(h, &later) || !TurnRetired(h, &refused) {
		t.Fatalf("TurnRetired: a later turn is open (got %v), a retired one closed (got %v)", TurnRetired(h, &later), TurnRetired(h, &refused))
	}
}

// A retirement that would make the history hold more rules than the API keeps
// does not happen: the calls stay, and no limit loses a fire.
func TestRetireRefusesToOverflowRuleFires(t *testing.T) {
	var calls []v1.ToolIntent
	for i := range v1.MaxRuleFires + 1 {
		in := done("t-t0-"+string(rune('a'+i%26))+string(rune('a'+i/26)), int32(i), 0, v1.OutcomeRedirected, epoch)
		in.Status.Decision = &v1.Decision{Action: v1.DecisionRedirect, PolicyRuleRef: v1.PolicyRuleReference{Kind: "ToolPolicy", Name: "p", Rule: "r" + in.Name}}
		calls = append(calls, in)
	}
	if h, ok := Retire(nil, "", "", calls); ok {
		t.Fatalf("retired %d rules' fires into a history of at most %d", len(h.RuleFires), v1.MaxRuleFires)
	}
}
