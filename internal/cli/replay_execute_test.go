package cli

import (
	"strings"
	"testing"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// What runs again: calls that ran read-only, and those named with --include that
// ran; never a call that did not run, nor toolgate's own push.
func TestReplayPlan(t *testing.T) {
	zero, one := int32(0), int32(1)
	ran := func(b *intentBuilder, category v1.CommandCategory) v1.ToolIntent {
		return b.valid().decided(v1.DecisionAllow, "", "", 0, "", category).
			observed(v1.Observation{Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: &zero, Summary: "[exit code: 0]\nok\n"}).obj()
	}
	intents := []v1.ToolIntent{
		ran(makeIntent("ns", "edit", 1, 0, v1.ToolEditFile, `{"path":"a","oldText":"x","newText":"y"}`), v1.CategoryWrite),
		ran(makeIntent("ns", "read", 0, 0, v1.ToolReadFile, `{"path":"a"}`), v1.CategoryReadOnly),
		makeIntent("ns", "denied", 0, 1, v1.ToolBash, `{"command":"curl x"}`).valid().decided(v1.DecisionDeny, "", "r", 0, "", v1.CategoryNetwork).
			observed(v1.Observation{Outcome: v1.OutcomeDenied, Summary: "[not executed]"}).obj(),
		ran(makeIntent("ns", "push", 2, 0, v1.ToolGitPush, `{}`), v1.CategoryNetwork),
		ran(makeIntent("ns", "test", 1, 1, v1.ToolBash, `{"command":"sh test.sh"}`), v1.CategoryTest),
	}
	intents[4].Status.Observation.ExitCode = &one

	calls, rerun, err := replayPlan(intents, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, comparison, reason string }{
		{"read", "", ""},
		{"denied", OutputNotReplayed, "it did not run when recorded (Denied)"},
		{"edit", OutputNotReplayed, "not read-only (category Write); name it with --include"},
		{"test", OutputNotReplayed, "not read-only (category Test)"},
		{"push", OutputNotReplayed, "git_push is toolgate's own step"},
	}
	for i, w := range want {
		c := calls[i]
		if c.Name != w.name || c.Comparison != w.comparison || !strings.Contains(c.Reason, w.reason) || (rerun[i] != nil) != (w.comparison == "") {
			t.Errorf("call %d: %s %q %q rerun %t; want %s %q %q", i, c.Name, c.Comparison, c.Reason, rerun[i] != nil, w.name, w.comparison, w.reason)
		}
	}

	calls, rerun, err = replayPlan(intents, []string{"test", "edit"})
	if err != nil || rerun[2] == nil || rerun[3] == nil || calls[3].Reason != "named with --include" {
		t.Fatalf("with --include test,edit: %v %+v", err, calls)
	}
	for include, want := range map[string]string{
		"denied":  "--include denied: it did not run when recorded (Denied)",
		"push":    "--include push: git_push is toolgate's own step",
		"missing": "--include missing: the task has no such intent",
	} {
		if _, _, err := replayPlan(intents, []string{include}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--include %s: %v; want %q", include, err, want)
		}
	}
}

func TestCompareOutputs(t *testing.T) {
	zero, one := int32(0), int32(1)
	rec := outputFacts(&v1.Observation{Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: &zero, Summary: "[exit code: 0]\na\n", ContentSHA256: "aa"})
	for _, tc := range []struct {
		name string
		now  v1.Observation
		want []string
	}{
		{"same", v1.Observation{Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: &zero, Summary: "[exit code: 0]\na\n", ContentSHA256: "aa"}, nil},
		{"exit code and output", v1.Observation{Outcome: v1.OutcomeFailed, Executed: true, ExitCode: &one, Summary: "[exit code: 1]\nb\n"},
			[]string{"outcome Succeeded -> Failed", "exit code 0 -> 1", "output the model saw differs", "file content sha256 aa -> -"}},
		{"denied now", v1.Observation{Outcome: v1.OutcomeDenied, Summary: "[not executed] denied by rule x"},
			[]string{"it did not run this time (Denied): [not executed] denied by rule x"}},
	} {
		c := ReexecutedCall{Recorded: rec, Replayed: outputFacts(&tc.now)}
		compareOutputs(&c)
		if (c.Comparison == OutputSame) != (tc.want == nil) || len(c.Differences) != len(tc.want) {
			t.Errorf("%s: %s %v; want %v", tc.name, c.Comparison, c.Differences, tc.want)
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(c.Differences[i], w) {
				t.Errorf("%s: difference %q; want %q", tc.name, c.Differences[i], w)
			}
		}
	}

	// The same head and tail over a different middle: the whole output's hash,
	// from the Executions, tells. Without one of the two hashes the summary decides.
	same := v1.Observation{Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: &zero, Summary: "[exit code: 0]\na\n", ContentSHA256: "aa"}
	for _, tc := range []struct {
		rec, now string
		want     string
	}{
		{"1111111111111111", "2222222222222222", "the whole output differs beyond the head and tail the model saw (sha256 111111111111 -> 222222222222)"},
		{"1111111111111111", "1111111111111111", ""},
		{"", "2222222222222222", ""},
	} {
		recorded, replayed := outputFacts(&same), outputFacts(&same)
		recorded.OutputSHA256, replayed.OutputSHA256 = tc.rec, tc.now
		c := ReexecutedCall{Recorded: recorded, Replayed: replayed}
		compareOutputs(&c)
		if got := strings.Join(c.Differences, "; "); got != tc.want || (c.Comparison == OutputChanged) != (tc.want != "") {
			t.Errorf("whole-output hashes %q, %q: %s %q; want %q", tc.rec, tc.now, c.Comparison, got, tc.want)
		}
	}
}

// A replay that stopped early counts as re-run only the calls it observed.
func TestRenderExecutionReplayCountsOnlyTheCallsThatRan(t *testing.T) {
	zero := int32(0)
	obs := outputFacts(&v1.Observation{Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: &zero, Summary: "[exit code: 0]\na\n"})
	rep := ExecutionReplayReport{Task: "t", Namespace: "ns", ReplayTask: "t-replay-x", Error: "t-t1-0: timed out",
		Calls: []ReexecutedCall{
			{Name: "t-t0-0", Tool: v1.ToolReadFile, Comparison: OutputSame, Recorded: obs, Replayed: obs},
			{Name: "t-t1-0", Tool: v1.ToolReadFile, Recorded: obs},
		}}
	var b strings.Builder
	if err := RenderExecutionReplay(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "0 of 1 re-run call(s) changed") || !strings.Contains(b.String(), "The replay stopped: t-t1-0: timed out") {
		t.Errorf("report:\n%s", b.String())
	}
}
