package argocd

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// unstructuredOf turns a typed object into the map Argo CD hands to Lua (integers as
// int64, as in Argo CD's live objects).
func unstructuredOf(t *testing.T, obj runtime.Object) map[string]any {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
}

type healthCase struct {
	name string
	obj  runtime.Object
	want HealthStatus
}

func runHealth(t *testing.T, kind string, cases []healthCase) {
	t.Helper()
	script := loadCustomizations(t).Health[kind]
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Health(script, unstructuredOf(t, tc.obj))
			if err != nil {
				t.Fatalf("health script failed: %v", err)
			}
			if got != tc.want {
				t.Errorf("health = %+v\nwant     %+v", got, tc.want)
			}
		})
	}
}

func agentTask(generation int64, status v1.AgentTaskStatus) *v1.AgentTask {
	return &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Name: "fix-tests", Namespace: "team-a", Generation: generation},
		Status:     status,
	}
}

func TestAgentTaskHealthEdgeCases(t *testing.T) {
	ready := cond(v1.ConditionReady, metav1.ConditionTrue, v1.ReasonWorkspaceReady, "workspace claim fix-tests-workspace is bound to the task")
	runHealth(t, "AgentTask", []healthCase{
		{"no status yet", agentTask(1, v1.AgentTaskStatus{}),
			HealthStatus{HealthProgressing, "waiting for the controller: the task has no status yet"}},
		{"status of an older generation", agentTask(3, v1.AgentTaskStatus{ObservedGeneration: 2, Phase: v1.TaskSucceeded,
			Conditions: []metav1.Condition{cond(v1.ConditionSucceeded, metav1.ConditionTrue, v1.ReasonMarkedDone, "done")}}),
			HealthStatus{HealthProgressing, "waiting for the controller: status describes generation 2, the spec is at generation 3"}},
		{"phase without observedGeneration", agentTask(1, v1.AgentTaskStatus{Phase: v1.TaskRunning}),
			HealthStatus{HealthProgressing, "waiting for the controller: status describes generation 0, the spec is at generation 1"}},
		{"no Ready condition yet", agentTask(1, v1.AgentTaskStatus{ObservedGeneration: 1, Phase: v1.TaskPending}),
			HealthStatus{HealthProgressing, "waiting for the controller: no Ready condition yet"}},
		{"running without intents", agentTask(1, v1.AgentTaskStatus{ObservedGeneration: 1, Phase: v1.TaskRunning, Conditions: []metav1.Condition{ready}}),
			HealthStatus{HealthProgressing, "Running: turn 0, 0 of 0 intents in flight"}},
		{"failed wins over awaiting approval", agentTask(2, v1.AgentTaskStatus{ObservedGeneration: 2, Phase: v1.TaskFailed, Conditions: []metav1.Condition{
			ready,
			cond(v1.ConditionAwaitingApproval, metav1.ConditionTrue, v1.ReasonIntentsAwaitingApproval, "waiting for a human decision on [a]"),
			cond(v1.ConditionFailed, metav1.ConditionTrue, v1.ReasonTurnBudgetExhausted, "the task used all 20 turns"),
		}}), HealthStatus{HealthDegraded, "TurnBudgetExhausted: the task used all 20 turns"}},
		{"succeeded with a result", agentTask(1, v1.AgentTaskStatus{ObservedGeneration: 1, Phase: v1.TaskSucceeded, Result: "all green", Conditions: []metav1.Condition{
			ready, cond(v1.ConditionSucceeded, metav1.ConditionTrue, v1.ReasonCompleted, "the model answered"),
		}}), HealthStatus{HealthHealthy, "Completed: the model answered"}},
	})
}

func toolIntent(status v1.ToolIntentStatus) *v1.ToolIntent {
	return &v1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Name: "fix-tests-t0-0", Generation: 1}, Status: status}
}

func TestToolIntentHealthEdgeCases(t *testing.T) {
	exit := int32(2)
	runHealth(t, "ToolIntent", []healthCase{
		{"no status yet", toolIntent(v1.ToolIntentStatus{}),
			HealthStatus{HealthProgressing, "waiting for the controller: the intent has no status yet"}},
		{"validated only", toolIntent(v1.ToolIntentStatus{Conditions: []metav1.Condition{cond(v1.ConditionValidated, metav1.ConditionTrue, v1.ReasonInputValid, "ok")}}),
			HealthStatus{HealthProgressing, "validating and deciding"}},
		{"held for a sibling", toolIntent(v1.ToolIntentStatus{Conditions: []metav1.Condition{
			cond(v1.ConditionDecided, metav1.ConditionTrue, v1.ReasonPolicyAllow, "Allow by ModeDefault/Edit"),
			cond(v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonWaitingForSiblings, "held while fix-tests-t0-1 waits for a human"),
		}}), HealthStatus{HealthSuspended, "held while fix-tests-t0-1 waits for a human"}},
		{"timed out", toolIntent(v1.ToolIntentStatus{
			Conditions:  []metav1.Condition{cond(v1.ConditionExecuted, metav1.ConditionTrue, v1.ReasonExecutionFinished, "Execution fix-tests-t0-0 finished: TimedOut")},
			Observation: &v1.Observation{Outcome: v1.OutcomeTimedOut, Executed: true, ExitCode: &exit},
		}), HealthStatus{HealthDegraded, "TimedOut (exit code 2): Execution fix-tests-t0-0 finished: TimedOut"}},
		{"aborted without an exit code or condition", toolIntent(v1.ToolIntentStatus{Observation: &v1.Observation{Outcome: v1.OutcomeAborted, Executed: true}}),
			HealthStatus{HealthDegraded, "Aborted: the tool ran"}},
		{"expired approval is a refusal", toolIntent(v1.ToolIntentStatus{
			Conditions:  []metav1.Condition{cond(v1.ConditionApproved, metav1.ConditionFalse, v1.ReasonApprovalExpired, "Approval x expired at 2030-01-01T00:00:00Z without a decision.")},
			Observation: &v1.Observation{Outcome: v1.OutcomeApprovalExpired},
		}), HealthStatus{HealthHealthy, "ApprovalExpired, nothing was executed: Approval x expired at 2030-01-01T00:00:00Z without a decision."}},
		{"redirected is the governance working", toolIntent(v1.ToolIntentStatus{
			Conditions:  []metav1.Condition{cond(v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonTurnRedirected, "Rule ToolPolicy/p/plan-rm redirected this call")},
			Observation: &v1.Observation{Outcome: v1.OutcomeRedirected},
		}), HealthStatus{HealthHealthy, "Redirected, nothing was executed: Rule ToolPolicy/p/plan-rm redirected this call"}},
		{"stopped ended the task", toolIntent(v1.ToolIntentStatus{
			Conditions:  []metav1.Condition{cond(v1.ConditionExecuted, metav1.ConditionFalse, v1.ReasonTurnStopped, "Rule ToolPolicy/p/tripwire stopped the task")},
			Observation: &v1.Observation{Outcome: v1.OutcomeStopped},
		}), HealthStatus{HealthDegraded, "Stopped, nothing was executed: Rule ToolPolicy/p/tripwire stopped the task"}},
	})
}

// approval is an Approval with one vote (none for an empty decision) and the status
// the controller records: state as given, the votes counted as it counts them.
func approval(generation, observed int64, decision v1.ApprovalDecision, by, comment string, state v1.ApprovalState, approvers *v1.Approvers) *v1.Approval {
	a := &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{Name: "fix-tests-t0-0", Generation: generation},
		Spec: v1.ApprovalSpec{
			Votes: fixtures.Votes(decision, by, comment), Approvers: approvers,
			ExpiresAt: metav1.NewTime(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
		},
		Status: v1.ApprovalStatus{State: state, ObservedGeneration: observed},
	}
	if observed == generation {
		t := pipeline.CountVotes(a)
		a.Status.Tally, a.Status.ApprovedBy, a.Status.DeniedBy = t.String(), t.ApprovedBy, t.DeniedBy
	}
	return a
}

func TestApprovalHealthEdgeCases(t *testing.T) {
	runHealth(t, "Approval", []healthCase{
		{"no status yet", approval(1, 0, "", "", "", "", nil),
			HealthStatus{HealthSuspended, "waiting for a decision by anyone with the approve verb until 2030-01-02T03:04:05Z"}},
		{"pending with approvers", approval(1, 1, "", "", "", v1.ApprovalStatePending, &v1.Approvers{Users: []string{"alice"}, Groups: []string{"sre"}}),
			HealthStatus{HealthSuspended, "waiting for a decision by alice, group sre until 2030-01-02T03:04:05Z (approvals 0/1, approved by nobody)"}},
		{"one approval of two", approval(2, 2, v1.DecisionApproved, "alice", "", v1.ApprovalStatePending, &v1.Approvers{Required: 2}),
			HealthStatus{HealthSuspended, "waiting for a decision by anyone with the approve verb until 2030-01-02T03:04:05Z (approvals 1/2, approved by alice)"}},
		{"voted, controller has not counted it", approval(2, 1, v1.DecisionApproved, "alice", "", v1.ApprovalStatePending, nil),
			HealthStatus{HealthProgressing, "a vote by alice is waiting for the controller to count it"}},
		{"approved, not yet used", approval(2, 2, v1.DecisionApproved, "alice", "", v1.ApprovalStateApproved, nil),
			HealthStatus{HealthHealthy, "Approved: approved by alice"}},
		{"denied without comment", approval(2, 2, v1.DecisionDenied, "bob", "", v1.ApprovalStateDenied, nil),
			HealthStatus{HealthHealthy, "Denied by bob"}},
		{"denied with a comment", approval(2, 2, v1.DecisionDenied, "bob", "use the mirror", v1.ApprovalStateDenied, nil),
			HealthStatus{HealthHealthy, "Denied by bob: use the mirror"}},
		{"expired", approval(1, 1, "", "", "", v1.ApprovalStateExpired, nil),
			HealthStatus{HealthDegraded, "Expired: nobody decided before 2030-01-02T03:04:05Z; the intent was not executed"}},
	})
}

func policyObj(cluster bool, generation int64, status v1.ToolPolicyStatus) runtime.Object {
	meta := metav1.ObjectMeta{Name: "team-a", Generation: generation}
	if cluster {
		return &v1.ClusterToolPolicy{ObjectMeta: meta, Status: status}
	}
	return &v1.ToolPolicy{ObjectMeta: meta, Status: status}
}

func TestPolicyHealth(t *testing.T) {
	for _, kind := range []string{"ToolPolicy", "ClusterToolPolicy"} {
		cluster := kind == "ClusterToolPolicy"
		t.Run(kind, func(t *testing.T) {
			runHealth(t, kind, []healthCase{
				{"no status yet", policyObj(cluster, 1, v1.ToolPolicyStatus{}),
					HealthStatus{HealthProgressing, "waiting for the controller to compile the policy"}},
				{"older generation", policyObj(cluster, 4, v1.ToolPolicyStatus{ObservedGeneration: 3, Conditions: []metav1.Condition{cond(v1.ConditionReady, metav1.ConditionTrue, v1.ReasonPolicyCompiled, "2 rules compiled and every example passed")}}),
					HealthStatus{HealthProgressing, "waiting for the controller: status describes generation 3, the spec is at generation 4"}},
				{"ready", policyObj(cluster, 4, v1.ToolPolicyStatus{ObservedGeneration: 4, Conditions: []metav1.Condition{cond(v1.ConditionReady, metav1.ConditionTrue, v1.ReasonPolicyCompiled, "2 rules compiled and every example passed")}}),
					HealthStatus{HealthHealthy, "Compiled: 2 rules compiled and every example passed"}},
				{"invalid", policyObj(cluster, 4, v1.ToolPolicyStatus{ObservedGeneration: 4, Conditions: []metav1.Condition{cond(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonPolicyInvalid, `rule "no-push": example "git push" does not match`)}}),
					HealthStatus{HealthDegraded, `Invalid: rule "no-push": example "git push" does not match`}},
				{"unknown", policyObj(cluster, 4, v1.ToolPolicyStatus{ObservedGeneration: 4, Conditions: []metav1.Condition{cond(v1.ConditionReady, metav1.ConditionUnknown, "Compiling", "")}}),
					HealthStatus{HealthProgressing, "Compiling"}},
			})
		})
	}
}
