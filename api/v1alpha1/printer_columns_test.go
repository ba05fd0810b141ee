package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// column is one printer column as kubectl get shows it: its name, whether only -o
// wide shows it, and the cell expected for the test's object ("" for any, such as
// an age).
type column struct {
	name string
	wide bool
	cell string
}

// serverTable is the Table the API server gives kubectl get for one object: the
// printer columns of the CRD, evaluated by the server.
func serverTable(t *testing.T, resource, ns, name string) metav1.Table {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	path := "/apis/toolgate.dev/v1alpha1/" + resource + "/" + name
	if ns != "" {
		path = "/apis/toolgate.dev/v1alpha1/namespaces/" + ns + "/" + resource + "/" + name
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, strings.TrimSuffix(env.Config.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s as a Table: %d %s %v", path, resp.StatusCode, body, err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatalf("GET %s: not a Table: %v", path, err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("GET %s: %d rows", path, len(table.Rows))
	}
	return table
}

// requireColumns checks that the table has the columns, in this order among
// themselves, and that each shows its cell. Columns not named are not checked (Name
// comes first, as for every kind).
func requireColumns(t *testing.T, table metav1.Table, want []column) {
	t.Helper()
	index := map[string]int{}
	var names []string
	for i, c := range table.ColumnDefinitions {
		index[c.Name] = i
		names = append(names, c.Name)
	}
	last := -1
	for _, w := range want {
		i, ok := index[w.name]
		if !ok {
			t.Errorf("no column %q; the columns are %v", w.name, names)
			continue
		}
		if i < last {
			t.Errorf("column %q comes before the one named before it in %v", w.name, names)
		}
		last = i
		if wide := table.ColumnDefinitions[i].Priority > 0; wide != w.wide {
			t.Errorf("column %q: shown only with -o wide %t, want %t", w.name, wide, w.wide)
		}
		got := ""
		if cell := table.Rows[0].Cells[i]; cell != nil {
			got = fmt.Sprint(cell)
		}
		if w.cell != "" && got != w.cell {
			t.Errorf("column %q shows %q, want %q", w.name, got, w.cell)
		}
	}
}

func setStatus(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Status().Update(context.Background(), obj); err != nil {
		t.Fatalf("status of %s: %v", obj.GetName(), err)
	}
}

func condition(typ string, status bool, reason string) metav1.Condition {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: reason, LastTransitionTime: metav1.Now()}
	if status {
		c.Status = metav1.ConditionTrue
	}
	return c
}

// What kubectl get shows of each kind is the API server's Table of the CRD's printer
// columns. Each column is checked against an object whose status is written, so a
// JSONPath that names no field (a typo, a renamed field) fails here instead of
// showing an empty column.
func TestPrinterColumns(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)

	t.Run("AgentTask", func(t *testing.T) {
		task := newTask(ns, "model-task")
		task.Spec.Agent = v1.AgentSpec{Model: &v1.ModelAgent{BaseURL: "http://model.example/v1", Model: "qwen3-coder"}}
		if err := env.Client.Create(ctx, task); err != nil {
			t.Fatal(err)
		}
		task.Status = v1.AgentTaskStatus{
			Phase:     v1.TaskFailed,
			AgentKind: v1.AgentKindModel,
			Turn:      7,
			Conditions: []metav1.Condition{
				condition(v1.ConditionReady, true, v1.ReasonWorkspaceReady),
				condition(v1.ConditionAwaitingApproval, false, v1.ReasonNoPendingApprovals),
				condition(v1.ConditionFailed, true, v1.ReasonTurnBudgetExhausted),
			},
			Intents: v1.IntentCounts{Total: 9, InFlight: 1, ByOutcome: v1.OutcomeCounts(map[v1.Outcome]int32{
				v1.OutcomeSucceeded: 4, v1.OutcomeFailed: 3, v1.OutcomeDenied: 1})},
			ApprovalRequests: 2,
			TokensUsed:       12345,
		}
		setStatus(t, task)
		requireColumns(t, serverTable(t, "agenttasks", ns, task.Name), []column{
			{name: "Agent", cell: "Model"},
			{name: "Phase", cell: "Failed"},
			{name: "Reason", cell: v1.ReasonTurnBudgetExhausted},
			{name: "Turn", cell: "7"},
			{name: "Intents", cell: "9"},
			{name: "Age"},
			{name: "Mode", wide: true, cell: string(task.Spec.Mode)},
			{name: "Model", wide: true, cell: "qwen3-coder"},
			{name: "Ready", wide: true, cell: v1.ReasonWorkspaceReady},
			{name: "In-Flight", wide: true, cell: "1"},
			{name: "Succeeded", wide: true, cell: "4"},
			{name: "Failed", wide: true, cell: "3"},
			{name: "Denied", wide: true, cell: "1"},
			{name: "Approvals", wide: true, cell: "2"},
			{name: "Tokens", wide: true, cell: "12345"},
		})
	})

	t.Run("ToolIntent", func(t *testing.T) {
		in := newIntent(ns, "fix-t3-0")
		in.Spec.TaskRef.Name = "fix"
		in.Spec.Turn = 3
		if err := env.Client.Create(ctx, in); err != nil {
			t.Fatal(err)
		}
		exit := int32(2)
		in.Status = v1.ToolIntentStatus{
			Decision:    &v1.Decision{Action: v1.DecisionAllow, PolicyRuleRef: v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "defaults", 0, "allow-tests"), Risk: v1.RiskLow},
			Observation: &v1.Observation{Outcome: v1.OutcomeFailed, Executed: true, ExitCode: &exit},
		}
		setStatus(t, in)
		requireColumns(t, serverTable(t, "toolintents", ns, in.Name), []column{
			{name: "Task", cell: "fix"},
			{name: "Turn", cell: "3"},
			{name: "Tool", cell: "bash"},
			{name: "Decision", cell: "Allow"},
			{name: "Outcome", cell: "Failed"},
			{name: "Age"},
			{name: "Risk", wide: true, cell: "Low"},
			{name: "Decided-By", wide: true, cell: "ToolPolicy"},
			{name: "Policy", wide: true, cell: "defaults"},
			{name: "Rule", wide: true, cell: "allow-tests"},
			{name: "Requester", wide: true, cell: "agent"},
			{name: "Exit", wide: true, cell: "2"},
		})
	})

	t.Run("Approval", func(t *testing.T) {
		a := newApproval(ns, "fix-t3-0")
		a.Spec.Request.Risk = v1.RiskHigh
		a.Spec.ExpiresAt = metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
		if err := env.Client.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
		a.Status = v1.ApprovalStatus{State: v1.ApprovalStatePending, Tally: "1/2", ApprovedBy: []string{"alice"}}
		setStatus(t, a)
		requireColumns(t, serverTable(t, "approvals", ns, a.Name), []column{
			{name: "Task", cell: "t"},
			{name: "Tool", cell: "edit_file"},
			{name: "Risk", cell: "High"},
			{name: "Requester", cell: "agent"},
			{name: "State", cell: "Pending"},
			{name: "Votes", cell: "1/2"},
			{name: "Expires", cell: a.Spec.ExpiresAt.UTC().Format(time.RFC3339)},
			{name: "Age"},
			{name: "Intent", wide: true, cell: "i"},
			{name: "Asked-By", wide: true, cell: "ToolPolicy"},
			{name: "Policy", wide: true, cell: "p"},
			{name: "Rule", wide: true, cell: "ask-edits"},
			{name: "Approved-By", wide: true, cell: `["alice"]`},
			{name: "Denied-By", wide: true},
		})
	})

	t.Run("Execution", func(t *testing.T) {
		exec := &v1.Execution{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fix-t3-0-x"},
			Spec: v1.ExecutionSpec{
				IntentRef: v1.LocalObjectReference{Name: "fix-t3-0"}, TaskRef: v1.LocalObjectReference{Name: "fix"},
				Tool: v1.ToolBash, Input: runtime.RawExtension{Raw: []byte(`{"command":"make test"}`)},
				TimeoutSeconds: 10, MaxOutputBytes: 4096,
				Sandbox: v1.SandboxProfile{Image: "busybox", WorkspaceClaimName: "ws"},
			},
		}
		if err := env.Client.Create(ctx, exec); err != nil {
			t.Fatal(err)
		}
		exit := int32(2)
		exec.Status = v1.ExecutionStatus{Phase: v1.ExecutionFailed, ErrorKind: v1.ErrorExitCode, ExitCode: &exit, PodName: "fix-t3-0-x-abcde", Truncated: true}
		setStatus(t, exec)
		requireColumns(t, serverTable(t, "executions", ns, exec.Name), []column{
			{name: "Intent", cell: "fix-t3-0"},
			{name: "Tool", cell: "bash"},
			{name: "Phase", cell: "Failed"},
			{name: "Error", cell: "ExitCode"},
			{name: "Exit", cell: "2"},
			{name: "Age"},
			{name: "Task", wide: true, cell: "fix"},
			{name: "Pod", wide: true, cell: "fix-t3-0-x-abcde"},
			{name: "Truncated", wide: true, cell: "true"},
		})
	})

	policyStatus := v1.ToolPolicyStatus{
		Rules:              3,
		ObservedGeneration: 1,
		Conditions:         []metav1.Condition{condition(v1.ConditionReady, false, "ExampleFailed")},
	}
	policyColumns := []column{
		{name: "Rules", cell: "3"},
		{name: "Ready", cell: "False"},
		{name: "Reason", cell: "ExampleFailed"},
		{name: "Age"},
		{name: "Observed", wide: true, cell: "1"},
	}
	t.Run("ToolPolicy", func(t *testing.T) {
		p := &v1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaults"}}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = policyStatus
		setStatus(t, p)
		requireColumns(t, serverTable(t, "toolpolicies", ns, p.Name), policyColumns)
	})
	t.Run("ClusterToolPolicy", func(t *testing.T) {
		p := &v1.ClusterToolPolicy{ObjectMeta: metav1.ObjectMeta{Name: ns + "-columns"}}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
		p.Status = policyStatus
		setStatus(t, p)
		requireColumns(t, serverTable(t, "clustertoolpolicies", "", p.Name), policyColumns)
	})
}
