package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

func TestTraceOfARecordedTask(t *testing.T) {
	ns := testNamespace(t)
	task, intents, approvals, executions := fixtureTask(ns)
	record(t, task)
	for i := range intents {
		record(t, &intents[i])
	}
	for i := range executions {
		record(t, &executions[i])
	}
	// The approvals are created Pending, as the controller does; alice denies one
	// herself and the controller's status follows.
	for i := range approvals {
		a := approvals[i].DeepCopy()
		a.Spec.Votes = nil
		a.Status = v1.ApprovalStatus{}
		record(t, a)
	}
	denial := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/spec/votes/-","value":{"user":"alice","decision":"Denied","comment":"vendor it instead"}}]`))
	denied := &v1.Approval{ObjectMeta: metav1.ObjectMeta{Name: "fix-tests-curl", Namespace: ns}}
	if err := userClients[alice].Patch(t.Context(), denied, denial); err != nil {
		t.Fatalf("alice's denial: %v", err)
	}
	denied.Status = v1.ApprovalStatus{State: v1.ApprovalStateDenied, DecidedAt: ptr.To(metav1.Now())}
	if err := env.Client.Status().Update(t.Context(), denied); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := kubectl(t, adminUser, ns, "", "trace", "fix-tests", "-o", "json")
	if code != 0 {
		t.Fatalf("trace exited %d: %s", code, errOut)
	}
	var tr Trace
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		t.Fatalf("trace -o json is not a Trace: %v\n%s", err, out)
	}
	var order []string
	byName := map[string]IntentTrace{}
	for _, turn := range tr.Turns {
		for _, it := range turn.Intents {
			order = append(order, it.Name)
			byName[it.Name] = it
		}
	}
	if got, want := strings.Join(order, " "), "fix-tests-read fix-tests-test fix-tests-curl fix-tests-push fix-tests-edit fix-tests-build"; got != want {
		t.Fatalf("intents in the trace: %s; want %s", got, want)
	}
	if tr.Task.Turn != 2 || tr.Task.Mode != v1.ModeEdit || len(tr.Turns) != 3 {
		t.Fatalf("task %+v with %d turns; want Edit, turn 2, 3 turns", tr.Task, len(tr.Turns))
	}
	curl := byName["fix-tests-curl"]
	if a := curl.Approval; a == nil || a.DecidedBy != alice || a.Decision != "Denied" || len(a.Votes) != 1 || a.Votes[0].Comment != "vendor it instead" || a.DecidedAt == nil {
		t.Fatalf("approval of fix-tests-curl: %+v; want Denied by alice with her comment and a decision time", curl.Approval)
	}
	if strings.Contains(curl.Input, "abcdef123456") || !strings.Contains(curl.Input, "[MASKED]") {
		t.Fatalf("input of fix-tests-curl is %q; want the bearer token masked", curl.Input)
	}
	test := byName["fix-tests-test"]
	if e := test.Execution; e == nil || e.ExitCode == nil || *e.ExitCode != 1 || e.DurationMillis != 12500 || e.JobName != "fix-tests-test" {
		t.Fatalf("execution of fix-tests-test: %+v; want job fix-tests-test, exit code 1, 12.5s", test.Execution)
	}
	if d := test.Decision; d == nil || d.PolicyRuleRef != v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "team", 2, "allow-tests") {
		t.Fatalf("decision of fix-tests-test: %+v", test.Decision)
	}
	if o := test.Observation; o == nil || !strings.HasPrefix(o.Summary, "[exit code: 1]\nFAIL src/sum.test.js") {
		t.Fatalf("observation of fix-tests-test: %+v", test.Observation)
	}
	if w := byName["fix-tests-build"].Waiting; !strings.Contains(w, "waiting for a decision on Approval fix-tests-build") {
		t.Fatalf("fix-tests-build waits for %q", w)
	}

	code, out, errOut = kubectl(t, adminUser, ns, "", "trace", "fix-tests")
	if code != 0 {
		t.Fatalf("trace exited %d: %s", code, errOut)
	}
	for _, want := range []string{"Turn 1\n", "Approval:    fix-tests-curl: Denied by alice at ", `vote: alice Denied, comment "vendor it instead"`, "Execution:   fix-tests-test: Failed, job fix-tests-test, exit code 1, 12.5s"} {
		if !strings.Contains(out, want) {
			t.Errorf("the trace lacks %q:\n%s", want, out)
		}
	}

	code, _, errOut = kubectl(t, adminUser, ns, "", "trace", "no-such-task")
	if code != 1 || !strings.Contains(errOut, `AgentTask "no-such-task" not found in namespace "`+ns+`"`) {
		t.Fatalf("trace of a missing task: exit %d, %q", code, errOut)
	}
}

// replayTask records an Edit task whose `npm test` was allowed by ToolPolicy/team
// rule allow-tests, and a read the mode allowed.
func replayTask(t *testing.T, ns string) *v1.ToolPolicy {
	t.Helper()
	team := &v1.ToolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
		Spec: v1.ToolPolicySpec{Rules: []v1.PolicyRule{{
			Name: "allow-tests", Action: v1.RuleAllow, Reason: "tests are safe here",
			Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryTest}},
		}}},
	}
	if err := env.Client.Create(t.Context(), team); err != nil {
		t.Fatal(err)
	}
	task, _, _, _ := fixtureTask(ns)
	task.Status = v1.AgentTaskStatus{Phase: v1.TaskSucceeded, Turn: 0, Conditions: []metav1.Condition{{
		Type: v1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: v1.ReasonMarkedDone, Message: "done", LastTransitionTime: metav1.Now(),
	}}}
	read := makeIntent(ns, "fix-tests-read", 0, 0, v1.ToolReadFile, `{"path":"package.json"}`).
		valid().decided(v1.DecisionAllow, "", "", 0, "no rule matched; Edit mode allows read-only calls", v1.CategoryReadOnly).obj()
	test := makeIntent(ns, "fix-tests-test", 0, 1, v1.ToolBash, `{"command":"npm test"}`).
		valid().decided(v1.DecisionAllow, "ToolPolicy/team", "allow-tests", team.Generation, "tests are safe here", v1.CategoryTest).obj()
	record(t, task, &read, &test)
	return team
}

func TestReplayDryRunReportsAFlippedDecision(t *testing.T) {
	ns := testNamespace(t)
	team := replayTask(t, ns)

	// Today's policies are those that decided: nothing changes, although the task
	// has finished (replay judges the calls, not whether the task still runs).
	code, out, errOut := kubectl(t, adminUser, ns, "", "replay", "fix-tests", "--dry-run")
	if code != replayUnchanged {
		t.Fatalf("replay with unchanged policies exited %d; want 0\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "No decision would change (2 intents replayed).") {
		t.Fatalf("replay report:\n%s", out)
	}

	// A tightened policy in a file, not applied yet, flips the past Allow to Deny.
	tightened := filepath.Join(t.TempDir(), "tightened.yaml")
	if err := os.WriteFile(tightened, []byte(`apiVersion: toolgate.dev/v1alpha1
kind: ToolPolicy
metadata:
  name: team
spec:
  rules:
  - name: deny-tests
    action: Deny
    reason: tests run in CI only
    match:
      categories: [Test]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = kubectl(t, adminUser, ns, "", "replay", "fix-tests", "--dry-run", "--policy", tightened)
	if code != replayChanged {
		t.Fatalf("replay with a tightened policy exited %d; want 1\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"! turn 0 [1] bash fix-tests-test",
		"recorded: Allow by ToolPolicy/team/allow-tests (generation 1): tests are safe here",
		"now:      Deny by ToolPolicy/team/deny-tests (generation 0): tests run in CI only",
		"CHANGED:  Allow -> Deny",
		"CHANGED:  deciding rule ToolPolicy/team/allow-tests -> ToolPolicy/team/deny-tests",
		"1 of 2 decisions would change.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "! turn 0 [0]") {
		t.Errorf("the read's decision did not change but is marked:\n%s", out)
	}

	// The same tightening applied to the cluster: replay reads the cluster's policies.
	team.Spec.Rules[0] = v1.PolicyRule{Name: "deny-tests", Action: v1.RuleDeny, Reason: "tests run in CI only", Match: v1.RuleMatch{Categories: []v1.CommandCategory{v1.CategoryTest}}}
	if err := env.Client.Update(t.Context(), team); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = kubectl(t, adminUser, ns, "", "replay", "fix-tests", "--dry-run", "-o", "json")
	if code != replayChanged {
		t.Fatalf("replay after tightening the cluster's policy exited %d; want 1\n%s\n%s", code, out, errOut)
	}
	var rep ReplayReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Changed != 1 || len(rep.Intents) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	got := rep.Intents[1]
	if !got.Changed || got.Recorded.Outcome != "Allow" || got.Replayed.Outcome != "Deny" || got.Replayed.PolicyRuleRef == nil || got.Replayed.PolicyRuleRef.Rule != "deny-tests" || got.Replayed.PolicyRuleRef.Generation != 2 {
		t.Fatalf("replayed npm test: %+v", got)
	}

	code, _, errOut = kubectl(t, adminUser, ns, "", "replay", "fix-tests")
	if code != replayError || !strings.Contains(errOut, "replay runs in one mode: --dry-run") {
		t.Fatalf("replay without a mode: exit %d, %q; want 2 and the modes", code, errOut)
	}
	// A flag of another mode is refused, not ignored.
	for _, args := range [][]string{
		{"--dry-run", "--base-url", "https://example.invalid/v1"},
		{"--execute", "--max-tokens", "10"},
		{"--model", "--include", "fix-tests-t0-0"},
		{"--dry-run", "--timeout", "1m"},
	} {
		code, _, errOut = kubectl(t, adminUser, ns, "", append([]string{"replay", "fix-tests"}, args...)...)
		if code != replayError || !strings.Contains(errOut, "--"+strings.TrimPrefix(args[1], "--")+" is for --") {
			t.Errorf("replay %v: exit %d, %q; want 2 naming the flag's mode", args, code, errOut)
		}
	}
}

func TestApproveVotesAsTheUserFromSelfSubjectReview(t *testing.T) {
	ns := testNamespace(t)
	a := fixtures.PendingApproval(ns, "fix-tests-build", agentUser, nil)
	record(t, a)

	// The kubeconfig calls its user "envtest"; the name recorded is the one the API
	// server authenticated.
	code, out, errOut := kubectl(t, alice, ns, "", "approve", "fix-tests-build", "-m", "builds are fine", "--yes")
	if code != 0 {
		t.Fatalf("approve exited %d: %s", code, errOut)
	}
	for _, want := range []string{"Tool:           bash", `Input:          {"command":"npm run build"}`, "Fingerprint:    " + a.Spec.Fingerprint, "Requested by:   agent-bot", "Votes:          0 of 1 approvals; voted: nobody; 1 more approval(s) needed",
		"Approval fix-tests-build approved by alice: 1 of 1 approvals; voted: alice (Approved); approved."} {
		if !strings.Contains(out, want) {
			t.Errorf("approve's output lacks %q:\n%s", want, out)
		}
	}
	got := &v1.Approval{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), got); err != nil {
		t.Fatal(err)
	}
	if want := fixtures.Votes(v1.DecisionApproved, alice, "builds are fine"); !equality.Semantic.DeepEqual(got.Spec.Votes, want) {
		t.Fatalf("stored votes %+v; want alice's approval with her comment", got.Spec.Votes)
	}

	// A second decision is stopped before it reaches the server, and says why.
	code, _, errOut = kubectl(t, bob, ns, "", "deny", "fix-tests-build", "--yes")
	if code != 1 || !strings.Contains(errOut, "error: the Approval fix-tests-build was already decided: Approved (1 of 1 approvals; voted: alice (Approved); approved); a decision is final") {
		t.Fatalf("second decision: exit %d, %q", code, errOut)
	}
}

func TestDenyAsksForConfirmation(t *testing.T) {
	ns := testNamespace(t)
	a := fixtures.PendingApproval(ns, "fix-tests-build", agentUser, nil)
	record(t, a)

	code, out, errOut := kubectl(t, bob, ns, "n\n", "deny", "fix-tests-build", "-m", "not now")
	if code != 1 || !strings.Contains(errOut, "not confirmed; nothing was changed") || !strings.Contains(out, "Deny this call as bob? [y/N]: ") {
		t.Fatalf("answering n: exit %d\n%s\n%s", code, out, errOut)
	}
	got := &v1.Approval{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Votes) != 0 {
		t.Fatalf("after answering n the approval has votes %+v", got.Spec.Votes)
	}

	code, _, errOut = kubectl(t, bob, ns, "yes\n", "deny", "fix-tests-build", "-m", "not now")
	if code != 0 {
		t.Fatalf("answering yes: exit %d: %s", code, errOut)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), got); err != nil {
		t.Fatal(err)
	}
	if want := fixtures.Votes(v1.DecisionDenied, bob, "not now"); !equality.Semantic.DeepEqual(got.Spec.Votes, want) {
		t.Fatalf("stored votes %+v; want bob's denial with his comment", got.Spec.Votes)
	}
}

func TestApproveRefusalIsPrintedClearly(t *testing.T) {
	ns := testNamespace(t)
	// alice asked for this call herself; the admission policy lets someone else decide.
	a := fixtures.PendingApproval(ns, "fix-tests-build", alice, nil)
	record(t, a)

	code, _, errOut := kubectl(t, alice, ns, "", "approve", "fix-tests-build", "--yes")
	if code != 1 {
		t.Fatalf("approving one's own intent exited %d; want 1", code)
	}
	want := "error: refused by admission policy approval-decision.toolgate.dev: you requested this intent, and the requester never votes: other people must decide.\n"
	if errOut != want {
		t.Fatalf("stderr is\n%q\nwant\n%q", errOut, want)
	}

	code, out, errOut := kubectl(t, adminUser, ns, "", "approvals")
	if code != 0 || !strings.Contains(out, "fix-tests-build") || !strings.Contains(out, "REQUESTED BY") {
		t.Fatalf("approvals after the refusal: exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestProposeWaitsForTheObservation(t *testing.T) {
	ns := testNamespace(t)
	task, _, _, _ := fixtureTask(ns)
	earlier := makeIntent(ns, "fix-tests-earlier", 2, 0, v1.ToolReadFile, `{"path":"package.json"}`).obj()
	record(t, task, &earlier)

	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := kubectl(t, agentUser, ns, "", "propose", "fix-tests", "--tool", "bash", "--input", `{"command":"npm test"}`, "--reason", "run the tests", "--wait", "--timeout", "60s")
		done <- result{code, out, errOut}
	}()

	// Play the controller: find the new intent and write its observation.
	var proposed v1.ToolIntent
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var list v1.ToolIntentList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, in := range list.Items {
			if in.Name != earlier.Name {
				proposed = in
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		select {
		case r := <-done:
			t.Fatalf("propose ended without creating an intent: exit %d\n%s\n%s", r.code, r.out, r.errOut)
		default:
			t.Fatalf("no intent was proposed: %v", err)
		}
	}
	s := proposed.Spec
	if s.RequestedBy != agentUser || s.Turn != 2 || s.Index != 1 || s.Tool != v1.ToolBash || string(s.Input.Raw) != `{"command":"npm test"}` || s.Reason != "run the tests" || s.TaskRef.Name != "fix-tests" {
		t.Fatalf("proposed intent: %+v; want agent-bot's npm test in turn 2 at index 1", s)
	}
	if !strings.HasPrefix(proposed.Name, "fix-tests-") {
		t.Fatalf("intent name %q does not come from the task's name", proposed.Name)
	}
	proposed.Status.Observation = &v1.Observation{Outcome: v1.OutcomeSucceeded, Executed: true, ExitCode: ptr.To[int32](0), Summary: "[exit code: 0]\nall 12 tests passed\n"}
	if err := env.Client.Status().Update(t.Context(), &proposed); err != nil {
		t.Fatal(err)
	}

	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("propose --wait did not return after the observation was written")
	}
	if r.code != 0 {
		t.Fatalf("propose --wait exited %d\n%s\n%s", r.code, r.out, r.errOut)
	}
	for _, want := range []string{"toolintent/" + proposed.Name + " created (task fix-tests, turn 2, index 1, requested by agent-bot)", "Observation of " + proposed.Name + ": Succeeded (executed)", "[exit code: 0]\nall 12 tests passed\n"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("propose's output lacks %q:\n%s", want, r.out)
		}
	}
}

// A proposer let in by a group just works: propose claims the task's groups the
// caller is in, admission accepts the claim, and only those groups are claimed.
func TestProposeClaimsTheCallersGroupsThatTheTaskNames(t *testing.T) {
	ns := testNamespace(t)
	byGroup, _, _, _ := fixtureTask(ns)
	byGroup.Spec.Agent.External.Proposers = v1.Proposers{Groups: []string{"other-team", proposerGroup}}
	byUser, _, _, _ := fixtureTask(ns)
	byUser.Name = "by-user"
	byUser.Spec.Agent.External.Proposers = v1.Proposers{Users: []string{carol}}
	record(t, byGroup, byUser)

	for _, tc := range []struct {
		task, wantOut string
		wantGroups    []string
	}{
		{byGroup.Name, "requested by carol as a member of team-a)", []string{proposerGroup}},
		{byUser.Name, "requested by carol)", nil},
	} {
		code, out, errOut := kubectl(t, carol, ns, "", "propose", tc.task, "--tool", "bash", "--input", `{"command":"ls"}`)
		if code != 0 || !strings.Contains(out, tc.wantOut) {
			t.Fatalf("propose into %s: exit %d, want %q in\n%s\n%s", tc.task, code, tc.wantOut, out, errOut)
		}
		var list v1.ToolIntentList
		if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, in := range list.Items {
			if in.Spec.TaskRef.Name == tc.task && in.Spec.RequestedBy == carol {
				found = true
				if !slices.Equal(in.Spec.RequestedByGroups, tc.wantGroups) {
					t.Errorf("intent for %s claims groups %v, want %v", tc.task, in.Spec.RequestedByGroups, tc.wantGroups)
				}
			}
		}
		if !found {
			t.Fatalf("no intent of carol for %s", tc.task)
		}
	}
}

func TestClaimedGroups(t *testing.T) {
	task := &v1.AgentTask{Spec: v1.AgentTaskSpec{Agent: v1.AgentSpec{External: &v1.ExternalAgent{
		Proposers: v1.Proposers{Users: []string{"alice"}, Groups: []string{"team-a", "sre"}},
	}}}}
	if got := pipeline.ClaimedGroups(task, []string{"system:authenticated", "sre", "team-b", "sre"}); !slices.Equal(got, []string{"sre"}) {
		t.Errorf("claimed %v, want [sre]", got)
	}
	if got := pipeline.ClaimedGroups(task, []string{"system:authenticated"}); got != nil {
		t.Errorf("claimed %v for a caller in none of the task's groups", got)
	}
	model := &v1.AgentTask{Spec: v1.AgentTaskSpec{Agent: v1.AgentSpec{Model: &v1.ModelAgent{}}}}
	if got := pipeline.ClaimedGroups(model, []string{"sre"}); got != nil {
		t.Errorf("claimed %v for a model task", got)
	}
}

func TestProposeWaitTimesOut(t *testing.T) {
	ns := testNamespace(t)
	task, _, _, _ := fixtureTask(ns)
	record(t, task)
	code, _, errOut := kubectl(t, agentUser, ns, "", "propose", "fix-tests", "--tool", "bash", "--input", `{"command":"ls"}`, "--wait", "--timeout", "1s")
	if code != 1 || !strings.Contains(errOut, "after 1s") || !strings.Contains(errOut, "kubectl toolgate trace fix-tests") {
		t.Fatalf("propose --wait without a controller: exit %d, %q", code, errOut)
	}
	code, _, errOut = kubectl(t, agentUser, ns, "", "propose", "fix-tests", "--tool", "bash", "--input", `["ls"]`)
	if code != 1 || !strings.Contains(errOut, "--input must be a JSON object") {
		t.Fatalf("propose with a JSON array: exit %d, %q", code, errOut)
	}
}

func TestOutputSaysWhereTheOutputIs(t *testing.T) {
	ns := testNamespace(t)
	task, intents, _, executions := fixtureTask(ns)
	record(t, task)
	byName := map[string]*v1.ToolIntent{}
	for i := range intents {
		byName[intents[i].Name] = &intents[i]
	}
	record(t, byName["fix-tests-test"], byName["fix-tests-push"], &executions[1])

	// The Job's pod is gone (no pod was ever created here).
	code, _, errOut := kubectl(t, adminUser, ns, "", "output", "fix-tests-test")
	if code != 1 {
		t.Fatalf("output with the pod gone exited %d", code)
	}
	for _, want := range []string{"the pod fix-tests-test-fghij of Job fix-tests-test is gone", "in the task's workspace at .toolgate/out/fix-tests-test.log", "kubectl get execution fix-tests-test -n " + ns} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q: %s", want, errOut)
		}
	}

	code, _, errOut = kubectl(t, adminUser, ns, "", "output", "fix-tests-push")
	if code != 1 || !strings.Contains(errOut, "ToolIntent fix-tests-push has no output: it ended Denied without executing") {
		t.Fatalf("output of a denied intent: exit %d, %q", code, errOut)
	}

	// A spent call's pod was reaped: its Execution holds the whole output.
	read := executions[0].DeepCopy()
	const whole = "{\"name\": \"app\"}\n"
	read.Status.Output = whole
	sum := sha256.Sum256([]byte(read.Status.Output))
	read.Status.OutputSHA256, read.Status.StdoutBytes = hex.EncodeToString(sum[:]), int64(len(read.Status.Output))
	read.Status.Sandbox = &v1.ObservedSandbox{UID: 65532, ReadOnlyRootFilesystem: true}
	read.Status.Conditions = []metav1.Condition{{Type: v1.ConditionComplete, Status: metav1.ConditionTrue, Reason: v1.ReasonJobSucceeded, Message: "the tool succeeded", LastTransitionTime: metav1.Now()}}
	record(t, byName["fix-tests-read"], read)
	code, out, errOut := kubectl(t, adminUser, ns, "", "output", "fix-tests-read")
	if code != 0 || out != whole || !strings.Contains(errOut, "printing it from the Execution") {
		t.Fatalf("output of a reaped call: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// A call of a session has no log of its own: the output is the Execution's when it
// holds all of it, and otherwise the command says where it is, never the session
// pod's log (which is not the call's).
func TestOutputOfASessionCall(t *testing.T) {
	ns := testNamespace(t)
	task, intents, _, executions := fixtureTask(ns)
	record(t, task)
	read := executions[0].DeepCopy()
	const whole = "{\"name\": \"app\"}\n"
	read.Status.JobName, read.Status.PodName, read.Status.SessionName = "", "toolgate-session-0123456789abcdef0123", "toolgate-session-0123456789abcdef0123"
	read.Status.Output = whole
	sum := sha256.Sum256([]byte(whole))
	read.Status.OutputSHA256, read.Status.StdoutBytes = hex.EncodeToString(sum[:]), int64(len(whole))
	read.Status.Sandbox = &v1.ObservedSandbox{UID: 65532, ReadOnlyRootFilesystem: true}
	read.Status.Conditions = []metav1.Condition{{Type: v1.ConditionComplete, Status: metav1.ConditionTrue, Reason: v1.ReasonJobSucceeded, Message: "the tool succeeded", LastTransitionTime: metav1.Now()}}
	var intent *v1.ToolIntent
	for i := range intents {
		if intents[i].Name == "fix-tests-read" {
			intent = &intents[i]
		}
	}
	record(t, intent, read)
	code, out, errOut := kubectl(t, adminUser, ns, "", "output", "fix-tests-read")
	if code != 0 || out != whole {
		t.Fatalf("output of a session call: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	cut := &v1.Execution{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(read), cut); err != nil {
		t.Fatal(err)
	}
	cut.Status.Truncated = true
	if err := env.Client.Status().Update(t.Context(), cut); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = kubectl(t, adminUser, ns, "", "output", "fix-tests-read")
	if code != 1 || !strings.Contains(errOut, "ran in session pod toolgate-session-0123456789abcdef0123, which keeps no log of a call") {
		t.Fatalf("output of a cut session call: exit %d, stderr %q", code, errOut)
	}
}

// A background job running in its session has no output to print yet, and says
// where it is; a job tool's answer, which no pod ran, prints from its Execution.
func TestOutputOfBackgroundJobsAndJobTools(t *testing.T) {
	ns := testNamespace(t)
	task, intents, _, executions := fixtureTask(ns)
	record(t, task)
	var intent *v1.ToolIntent
	for i := range intents {
		if intents[i].Name == "fix-tests-read" {
			intent = &intents[i]
		}
	}
	job := executions[0].DeepCopy()
	job.Status = v1.ExecutionStatus{
		Phase: v1.ExecutionRunning, SessionName: "toolgate-session-0123456789abcdef0123", PodName: "toolgate-session-0123456789abcdef0123",
		Background: &v1.BackgroundStatus{StartedAt: metav1.Now()},
		Conditions: []metav1.Condition{{Type: v1.ConditionComplete, Status: metav1.ConditionFalse, Reason: v1.ReasonSessionRunning, Message: "running", LastTransitionTime: metav1.Now()}},
	}
	record(t, intent, job)
	code, _, errOut := kubectl(t, adminUser, ns, "", "output", "fix-tests-read")
	if code != 1 || !strings.Contains(errOut, "is a background job running in session pod toolgate-session-0123456789abcdef0123") || !strings.Contains(errOut, "job_output") {
		t.Fatalf("output of a running job: exit %d, stderr %q", code, errOut)
	}

	answered := &v1.Execution{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), answered); err != nil {
		t.Fatal(err)
	}
	const answer = "[job fix-tests-j: running since 2026-12-02T00:00:00Z, 5 bytes of output so far]\ntick\n"
	answered.Status = v1.ExecutionStatus{
		Phase: v1.ExecutionSucceeded, ExitCode: ptr.To[int32](0), Output: answer,
		Conditions: []metav1.Condition{{Type: v1.ConditionComplete, Status: metav1.ConditionTrue, Reason: v1.ReasonJobToolAnswered, Message: "answered", LastTransitionTime: metav1.Now()}},
	}
	if err := env.Client.Status().Update(t.Context(), answered); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := kubectl(t, adminUser, ns, "", "output", "fix-tests-read")
	if code != 0 || out != answer {
		t.Fatalf("output of a job tool: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestPendingApprovalsAreListedOldestFirst(t *testing.T) {
	ns := testNamespace(t)
	for _, name := range []string{"first", "second", "third"} {
		record(t, fixtures.PendingApproval(ns, name, agentUser, nil))
		time.Sleep(1100 * time.Millisecond) // creation timestamps have second resolution
	}
	decided := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/spec/votes/-","value":{"user":"alice","decision":"Approved"}}]`))
	if err := userClients[alice].Patch(t.Context(), &v1.Approval{ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: ns}}, decided); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := kubectl(t, alice, ns, "", "approvals", "-o", "json")
	if code != 0 {
		t.Fatalf("approvals exited %d: %s", code, errOut)
	}
	var rows []PendingApproval
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
	}
	if strings.Join(names, " ") != "first third" {
		t.Fatalf("pending approvals: %v; want first third", names)
	}
}
