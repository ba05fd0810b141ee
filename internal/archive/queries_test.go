package archive

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// finished is a finished call of task t by who, decided action by rule r of
// ToolPolicy p; approvedBy, when set, approved it.
func finished(name, who string, action v1.DecisionAction, rule, approvedBy string, at time.Time) (*v1.ToolIntent, *v1.Approval, *v1.Execution) {
	observed := metav1.NewTime(at)
	intent := &v1.ToolIntent{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(at.Add(-time.Minute))},
		Spec: v1.ToolIntentSpec{TaskRef: v1.LocalObjectReference{Name: "t"}, Tool: v1.ToolBash, RequestedBy: who,
			Input: runtime.RawExtension{Raw: []byte(`{"command":"make test"}`)}},
		Status: v1.ToolIntentStatus{
			Decision:    &v1.Decision{Action: action, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 1, rule), Reason: "because " + rule},
			Observation: &v1.Observation{Outcome: v1.OutcomeSucceeded, ObservedAt: &observed},
		},
	}
	var approval *v1.Approval
	if approvedBy != "" {
		approval = &v1.Approval{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("approval-" + name)},
			Spec:   v1.ApprovalSpec{Votes: fixtures.Votes(v1.DecisionApproved, approvedBy, "")},
			Status: v1.ApprovalStatus{State: v1.ApprovalStateConsumed, ConsumedByExecutionName: name, ApprovedBy: []string{approvedBy}}}
	}
	exec := &v1.Execution{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("exec-" + name)}, Status: v1.ExecutionStatus{Phase: v1.ExecutionSucceeded, Output: "ok"}}
	if action == v1.DecisionDeny {
		exec = nil
	}
	return intent, approval, exec
}

func TestTheDocumentedQueriesFindTheirCalls(t *testing.T) {
	a, dsn := open(t)
	now := time.Now().UTC()
	for _, c := range []struct {
		name, who  string
		action     v1.DecisionAction
		rule, by   string
		daysBefore int
	}{
		{"approved-recent", "agent-1", v1.DecisionAsk, "ask-network", "alice", 1},
		{"approved-old", "agent-1", v1.DecisionAsk, "ask-network", "alice", 120},
		{"approved-other-agent", "agent-2", v1.DecisionAsk, "ask-network", "bob", 2},
		{"allowed", "agent-1", v1.DecisionAllow, "read-only", "", 1},
		{"denied-by-freeze", "agent-1", v1.DecisionDeny, "freeze", "", 3},
		{"denied-by-other", "agent-1", v1.DecisionDeny, "no-curl", "", 3},
	} {
		rec, err := CallRecord(finishedCall(c.name, c.who, c.action, c.rule, c.by, now.AddDate(0, 0, -c.daysBefore)))
		if err != nil {
			t.Fatal(err)
		}
		store(t, a, rec)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows := func(sql string, args ...any) []string {
		t.Helper()
		r, err := conn.Query(t.Context(), sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out []string
		for r.Next() {
			vals, err := r.Values()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(vals[0], "/", vals[3]))
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := fmt.Sprint(rows(QueryApprovedCallsOf, "team-a", "agent-1", 90)); got != "[approved-recent/alice]" {
		t.Errorf("approved calls of agent-1 in 90 days: %s", got)
	}
	if got := fmt.Sprint(rows(QueryDeniesBy, "team-a", "ToolPolicy", "p", "freeze")); got != "[denied-by-freeze/because freeze]" {
		t.Errorf("denies by ToolPolicy/p/freeze: %s", got)
	}
}

func finishedCall(name, who string, action v1.DecisionAction, rule, by string, at time.Time) (string, *v1.ToolIntent, *v1.Approval, *v1.Execution) {
	i, a, e := finished(name, who, action, rule, by, at)
	return "task-uid", i, a, e
}

func TestOnlyAFinishedCallIsRecorded(t *testing.T) {
	intent, _, _ := finished("open", "agent", v1.DecisionAllow, "r", "", time.Now())
	intent.Status.Observation = nil
	if _, err := CallRecord("task-uid", intent, nil, nil); err == nil {
		t.Fatal("a call without an observation was recorded")
	}
}
