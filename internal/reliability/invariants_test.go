package reliability

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// The checker is tested on runs made up to break each promise once: a checker that
// cannot fail would let every fault test pass.

func intent(name string, action v1.DecisionAction, obs *v1.Observation) *v1.ToolIntent {
	in := &v1.ToolIntent{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"}}
	if action != "" {
		in.Status.Decision = &v1.Decision{Action: action}
	}
	in.Status.Observation = obs
	return in
}

func observation(outcome v1.Outcome, executed bool) *v1.Observation {
	return &v1.Observation{Outcome: outcome, Executed: executed, Summary: string(outcome)}
}

func controlledBy(kind, name string, uid types.UID) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: kind, Name: name, UID: uid, Controller: &yes}}
}

func execution(name string, of *v1.ToolIntent, approval string) *v1.Execution {
	return &v1.Execution{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-exec-" + name), OwnerReferences: controlledBy("ToolIntent", of.Name, of.UID)},
		Spec:       v1.ExecutionSpec{ApprovalRef: v1.LocalObjectReferenceTo(approval)},
	}
}

func job(name string, of *v1.Execution) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-job-" + name), OwnerReferences: controlledBy("Execution", of.Name, of.UID)}}
}

func approval(name string, decision v1.ApprovalDecision, state v1.ApprovalState, consumedBy string) *v1.Approval {
	return &v1.Approval{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-approval-" + name)},
		Spec:       v1.ApprovalSpec{Votes: fixtures.Votes(decision, "bob", "")},
		Status:     v1.ApprovalStatus{State: state, ConsumedByExecutionName: consumedBy},
	}
}

// healthy is a run that keeps every promise: an allowed call that ran, an asked
// call that ran on its approval, a denied call, an expired one.
func healthy() *History {
	h := NewHistory()
	allowed := intent("allowed", v1.DecisionAllow, observation(v1.OutcomeSucceeded, true))
	asked := intent("asked", v1.DecisionAsk, observation(v1.OutcomeSucceeded, true))
	h.Intent(intent("allowed", "", nil))
	h.Intent(allowed)
	h.Intent(asked)
	h.Intent(intent("denied", v1.DecisionDeny, observation(v1.OutcomeDenied, false)))
	h.Intent(intent("expired", v1.DecisionAsk, observation(v1.OutcomeApprovalExpired, false)))
	e1, e2 := execution("allowed", allowed, ""), execution("asked", asked, "asked")
	h.Execution(e1)
	h.Execution(e2)
	h.Job(job("allowed", e1))
	h.Job(job("asked", e2))
	h.Approval(approval("asked", v1.DecisionApproved, v1.ApprovalStateApproved, ""))
	h.Approval(approval("asked", v1.DecisionApproved, v1.ApprovalStateConsumed, "asked"))
	h.Approval(approval("expired", "", v1.ApprovalStateExpired, ""))
	return h
}

func TestCheckAcceptsAHealthyRun(t *testing.T) {
	if v := healthy().Check(); len(v) != 0 {
		t.Fatalf("violations in a healthy run: %v", v)
	}
}

func TestCheckFindsEachBrokenPromise(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(h *History)
		want    string
	}{
		{"an intent never observed", func(h *History) { h.Intent(intent("open", v1.DecisionAllow, nil)) }, "ToolIntent ns/open has no observation"},
		{"an observation changed", func(h *History) {
			h.Intent(intent("denied", v1.DecisionDeny, observation(v1.OutcomeSucceeded, true)))
		}, "ToolIntent ns/denied changed its observation: first Denied"},
		{"an observation lost", func(h *History) { h.Intent(intent("denied", v1.DecisionDeny, nil)) }, "ToolIntent ns/denied lost its observation"},
		{"two Executions for one intent", func(h *History) {
			in := h.intents["uid-allowed"].last
			e := execution("allowed-again", in, "")
			e.UID = "uid-second"
			h.Execution(e)
		}, "ToolIntent ns/allowed has 2 Executions"},
		{"an Execution re-created under its name (another UID)", func(h *History) {
			in := h.intents["uid-allowed"].last
			e := execution("allowed", in, "")
			e.UID = "uid-recreated"
			h.Execution(e)
		}, "ToolIntent ns/allowed has 2 Executions"},
		{"two Jobs for one call", func(h *History) {
			e := h.executions["uid-exec-allowed"]
			h.Job(job("allowed-retry", e))
		}, "ToolIntent ns/allowed ran 2 Jobs"},
		{"an Execution of a denied call", func(h *History) {
			h.Execution(execution("denied", h.intents["uid-denied"].last, ""))
		}, "ToolIntent ns/denied was refused (Denied) but has Execution denied"},
		{"an Execution of an asked call with no approval", func(h *History) {
			in := intent("sneaky", v1.DecisionAsk, observation(v1.OutcomeSucceeded, true))
			h.Intent(in)
			h.Execution(execution("sneaky", in, ""))
		}, "Execution ns/sneaky names no approval but ToolIntent ns/sneaky was decided Ask"},
		{"an Execution on an approval consumed by another", func(h *History) {
			in := intent("other", v1.DecisionAsk, observation(v1.OutcomeSucceeded, true))
			h.Intent(in)
			h.Execution(execution("other", in, "asked"))
		}, "Approval ns/asked is named by 2 Executions"},
		{"an Execution on an approval not consumed", func(h *History) {
			in := intent("early", v1.DecisionAsk, observation(v1.OutcomeSucceeded, true))
			h.Intent(in)
			h.Approval(approval("early", v1.DecisionApproved, v1.ApprovalStateApproved, ""))
			h.Execution(execution("early", in, "early"))
		}, "Execution ns/early runs on Approval early, which is Approved"},
		{"an approval consumed twice", func(h *History) {
			h.Approval(approval("asked", v1.DecisionApproved, v1.ApprovalStateConsumed, "someone-else"))
		}, "Approval ns/asked was consumed by Execution asked and then by \"someone-else\""},
		{"a Job for a call observed as not executed", func(h *History) {
			in := intent("quiet", v1.DecisionAllow, observation(v1.OutcomeFailed, false))
			h.Intent(in)
			e := execution("quiet", in, "")
			h.Execution(e)
			h.Job(job("quiet", e))
		}, "ToolIntent ns/quiet is observed as not executed (Failed) but Job quiet was made"},
		{"an Execution with no owner", func(h *History) {
			h.Execution(&v1.Execution{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orphan", UID: "uid-orphan"}})
		}, "Execution ns/orphan has no controlling ToolIntent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := healthy()
			tc.breakIt(h)
			v := h.Check()
			for _, got := range v {
				if strings.Contains(string(got), tc.want) {
					return
				}
			}
			t.Fatalf("want a violation containing %q, got %v", tc.want, v)
		})
	}
}
