package pipeline

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func TestCallStopped(t *testing.T) {
	for _, tc := range []struct {
		name      string
		taskEnded string
		intent    *v1.ToolIntent
		want      string
	}{
		{name: "a running task and a call not cancelled go on", intent: makeIntent("i").requestedBy("alice").obj()},
		{name: "no intent: only the task decides", taskEnded: "it was cancelled", want: "it was cancelled"},
		{name: "the task's end comes first", taskEnded: "it Succeeded", intent: makeIntent("i").requestedBy("alice").cancel().obj(), want: "it Succeeded"},
		{name: "the proposer's cancel names the requester", intent: makeIntent("i").requestedBy("alice").cancel().obj(), want: "ToolIntent i was cancelled by alice (spec.cancel)"},
		{name: "no requester recorded", intent: makeIntent("i").requestedBy("").cancel().obj(), want: "ToolIntent i was cancelled by its proposer (spec.cancel)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CallStopped(tc.taskEnded, tc.intent); got != tc.want {
				t.Errorf("CallStopped = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCancelledObservations(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cancelled := makeIntent("i").requestedBy("alice").cancel().obj()

	before := CancelledBeforeRun(cancelled, now)
	if before.Outcome != v1.OutcomeAborted || before.Executed {
		t.Errorf("before it ran: %+v, want Aborted, not executed", before)
	}
	want := "[not executed] Nothing was run for this call. The call was aborted:\n" +
		"The call was cancelled by alice (spec.cancel on ToolIntent i) before it ran; nothing of it ran, and the workspace is as it was."
	if diff := cmp.Diff(want, before.Summary); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}

	aborted := makeExecution("i").failed(v1.ErrorAborted, "the Job i was deleted before the tool finished; whether it changed anything is unknown").obj()
	for _, tc := range []struct {
		name   string
		intent *v1.ToolIntent
		exec   *v1.Execution
		says   bool
	}{
		{name: "cancelled while it ran", intent: cancelled, exec: aborted, says: true},
		{name: "aborted, not cancelled (its Job was deleted)", intent: makeIntent("i").requestedBy("alice").obj(), exec: aborted},
		{name: "cancelled, but it finished first: its result stands", intent: cancelled, exec: makeExecution("i").succeeded().output("ok\n").obj()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain := FromExecution(tc.exec, now)
			got := CancelledWhileRunning(tc.intent, FromExecution(tc.exec, now))
			note := "\nThe call was cancelled by alice (spec.cancel on ToolIntent i) while it ran, and it was stopped before it finished: the workspace may be partly changed by it."
			wantSummary := plain.Summary
			if tc.says {
				wantSummary += note
			}
			if got.Summary != wantSummary || got.Outcome != plain.Outcome || got.Executed != plain.Executed {
				t.Errorf("got %+v\nwant summary %q", got, wantSummary)
			}
		})
	}
}
