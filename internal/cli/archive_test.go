package cli

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/archiveapi/apitest"
	"github.com/toolgate/toolgate/internal/testing/pgtest"
)

// The archive's tests serve a real archive (PostgreSQL from pgtest) through the
// envtest kube-apiserver's aggregation layer, as a cluster does, and run the
// commands against both.
var (
	archiveOnce sync.Once
	archiveErr  error
	archived    *archive.Archive
	archiveDSN  string
	stopArchive func()
)

// startArchive serves the archive's API once for the package.
func startArchive(t *testing.T) *archive.Archive {
	t.Helper()
	e := startEnv(t)
	archiveOnce.Do(func() {
		pg, err := pgtest.Start()
		if err != nil {
			archiveErr = err
			return
		}
		archiveDSN = pg.DSN("postgres")
		if archived, err = archive.Open(context.Background(), archiveDSN); err != nil {
			archiveErr = err
			_ = pg.Close()
			return
		}
		_, stop, err := apitest.Serve(context.Background(), e, archived)
		if err != nil {
			archiveErr = err
			archived.Close()
			_ = pg.Close()
			return
		}
		stopArchive = func() { _ = stop(); archived.Close(); _ = pg.Close() }
	})
	if archiveErr != nil {
		t.Fatalf("serving the archive: %v", archiveErr)
	}
	return archived
}

// recordDecidedTask records fixtureTask's history in ns, with the approval of
// fix-tests-curl denied by alice, as TestTraceOfARecordedTask does.
func recordDecidedTask(t *testing.T, ns string) *v1.AgentTask {
	t.Helper()
	task, intents, approvals, executions := fixtureTask(ns)
	record(t, task)
	for i := range intents {
		record(t, &intents[i])
	}
	for i := range executions {
		record(t, &executions[i])
	}
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
	return task
}

// archiveAndDelete stores every finished call of the task in the archive, as the
// archiver does, then deletes its intent, Approval and Execution from the
// cluster, as retention will. It returns the names of the calls it moved.
func archiveAndDelete(t *testing.T, a *archive.Archive, task *v1.AgentTask) []string {
	t.Helper()
	ctx, ns := t.Context(), task.Namespace
	var intents v1.ToolIntentList
	if err := env.Client.List(ctx, &intents, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var moved []string
	for i := range intents.Items {
		in := &intents.Items[i]
		if in.Status.Observation == nil {
			continue // an open call is neither archived nor deleted
		}
		var approval *v1.Approval
		var exec *v1.Execution
		if n := in.Status.ApprovalName; n != "" {
			approval = &v1.Approval{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, approval); err != nil {
				t.Fatal(err)
			}
		}
		if n := in.Status.ExecutionName; n != "" {
			exec = &v1.Execution{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, exec); err != nil {
				t.Fatal(err)
			}
		}
		rec, err := archive.CallRecord(string(task.UID), in, approval, exec)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.Store(ctx, rec); err != nil {
			t.Fatal(err)
		}
		for _, obj := range []client.Object{in, approval, exec} {
			if obj != nil && !isNil(obj) {
				if err := env.Client.Delete(ctx, obj); err != nil {
					t.Fatalf("deleting %s: %v", obj.GetName(), err)
				}
			}
		}
		moved = append(moved, in.Name)
	}
	return moved
}

func isNil(obj client.Object) bool {
	switch o := obj.(type) {
	case *v1.Approval:
		return o == nil
	case *v1.Execution:
		return o == nil
	}
	return false
}

// runAll runs the read commands of the test and returns what each printed.
func runAll(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, args := range [][]string{
		{"trace", "fix-tests"}, {"trace", "fix-tests", "-o", "json"},
		{"replay", "fix-tests", "--dry-run", "-o", "json"},
		{"output", "fix-tests-test"}, {"output", "fix-tests-push"}, {"output", "fix-tests-read"},
	} {
		code, stdout, stderr := kubectl(t, alice, ns, "", args...)
		out[strings.Join(args, " ")] = fmt.Sprintf("exit %d\n--- stdout\n%s\n--- stderr\n%s", code, stdout, stderr)
	}
	return out
}

// TestArchivedCallsReadTheSame: trace, output and replay --dry-run print the same
// for a call whose ToolIntent, Approval and Execution were deleted from the
// cluster once archived as while they were there.
func TestArchivedCallsReadTheSame(t *testing.T) {
	a := startArchive(t)
	ns := testNamespace(t)
	task := recordDecidedTask(t, ns)
	before := runAll(t, ns)
	moved := archiveAndDelete(t, a, task)
	if len(moved) < 3 {
		t.Fatalf("only %v were archived and deleted", moved)
	}
	var left v1.ToolIntentList
	if err := env.Client.List(t.Context(), &left, client.InNamespace(ns)); err != nil || len(left.Items) != 6-len(moved) {
		t.Fatalf("%d intents left in the cluster (%v), want %d", len(left.Items), err, 6-len(moved))
	}
	after := runAll(t, ns)
	for cmd, want := range before {
		if after[cmd] != want {
			t.Errorf("kubectl toolgate %s changed once %v were archived and deleted:\nbefore:\n%s\nafter:\n%s", cmd, moved, want, after[cmd])
		}
	}
	if !strings.Contains(before["trace fix-tests"], "fix-tests-test: Failed, job fix-tests-test") {
		t.Errorf("the trace does not show the archived execution:\n%s", before["trace fix-tests"])
	}
}

// TestAuditVerifyFindsAChangedByte: audit verify says OK with the record count
// and last hash, then finds a byte changed in PostgreSQL and says where.
func TestAuditVerifyFindsAChangedByte(t *testing.T) {
	a := startArchive(t)
	ns := testNamespace(t)
	task := recordDecidedTask(t, ns)
	moved := archiveAndDelete(t, a, task)

	code, out, errOut := kubectl(t, alice, ns, "", "audit", "verify", "fix-tests")
	want := fmt.Sprintf("OK: the chain of AgentTask %s/fix-tests (UID %s) holds: %d records, the last hashed ", ns, task.UID, len(moved))
	if code != 0 || !strings.HasPrefix(out, want) {
		t.Fatalf("audit verify of an intact chain: exit %d, %q, %q; want %q", code, out, errOut, want)
	}

	conn, err := pgx.Connect(t.Context(), archiveDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	tag, err := conn.Exec(t.Context(), `UPDATE records SET body = jsonb_set(body, '{intent,spec,reason}', '"see the test scripu"') WHERE namespace = $1 AND name = 'fix-tests-read'`, ns)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("changing the record: %v (%d rows)", err, tag.RowsAffected())
	}
	code, out, errOut = kubectl(t, alice, ns, "", "audit", "verify", "fix-tests")
	if code != 1 || !strings.Contains(out, "BROKEN") || !strings.Contains(out, "(fix-tests-read)") || !strings.Contains(out, "it was changed after it was stored") {
		t.Fatalf("audit verify of a changed record: exit %d, %q, %q", code, out, errOut)
	}

	code, _, errOut = kubectl(t, alice, ns, "", "audit", "verify", "no-such-task")
	if code != 2 || !strings.Contains(errOut, `nothing of AgentTask "no-such-task"`) {
		t.Fatalf("audit verify of an unknown task: exit %d, %q", code, errOut)
	}
}
