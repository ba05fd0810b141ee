package reliability

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/testing/pgtest"
)

// The record's life under faults (docs/archive.md): the manager runs with an
// archive in a real PostgreSQL and a retention window of a second, so calls are
// archived and retired while the workload runs, and the task is deleted a second
// after it is marked done. Whatever happens to the controller or the database,
// nothing leaves the cluster that the archive does not hold, and no record is lost
// or stored twice.

// archiveRun is one run's archive: its database and the manager flags that use it.
type archiveRun struct {
	dsn   string
	flags []string
}

func newArchiveRun(t *testing.T, server *pgtest.Server) archiveRun {
	t.Helper()
	dsn := server.NewDatabase(t)
	file := filepath.Join(t.TempDir(), "archive-dsn")
	if err := os.WriteFile(file, []byte(dsn), 0o600); err != nil {
		t.Fatal(err)
	}
	return archiveRun{dsn: dsn, flags: []string{"--archive-dsn-file=" + file, "--call-retention=1s", "--task-ttl-after-finished=1s"}}
}

// markDone marks the external task done: it ends once nothing is in flight.
func markDone(t *testing.T, ns, name string) {
	t.Helper()
	task := &v1.AgentTask{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, task); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(task.DeepCopy())
	task.Spec.Lifecycle = v1.LifecycleDone
	if err := env.Client.Patch(t.Context(), task, patch); err != nil {
		t.Fatal(err)
	}
}

// waitTaskGone waits until the task has left the cluster (its calls first).
func waitTaskGone(t *testing.T, ns, name string, timeout time.Duration, p *managerProcess) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1.AgentTask{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		var left v1.ToolIntentList
		_ = env.Client.List(t.Context(), &left, client.InNamespace(ns))
		t.Fatalf("task %s still in the cluster after %s, with %d intents; the manager's log:\n%s", name, timeout, len(left.Items), p.tail())
	}
}

// wantEveryRecordOnce checks the end state of a run whose task left the cluster:
// every intent the recorder saw was deleted and is in the archive, the archive
// holds exactly one record per call and one for the task, and the task's chain
// verifies.
func wantEveryRecordOnce(t *testing.T, run archiveRun, r *Recorder, calls int) {
	t.Helper()
	a, err := archive.Open(t.Context(), run.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	intents := r.Intents()
	if len(intents) != calls {
		t.Fatalf("the recorder saw %d intents, want %d", len(intents), calls)
	}
	taskUID := ""
	for _, in := range intents {
		got := &v1.ToolIntent{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(in), got); !apierrors.IsNotFound(err) {
			t.Errorf("ToolIntent %s is still in the cluster after its task left (%v)", in.Name, err)
		}
		if has, err := a.Has(t.Context(), string(in.UID)); err != nil || !has {
			t.Errorf("ToolIntent %s (uid %s) left the cluster and the archive does not hold it (%v)", in.Name, in.UID, err)
		}
		if d := in.Status.Decision; d != nil && d.Sandbox != nil {
			taskUID = d.Sandbox.TaskUID
		}
	}
	conn, err := pgx.Connect(t.Context(), run.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var callRows, taskRows int
	// Managers cache every namespace: an earlier test's leftovers may be archived
	// here too, in their own namespaces.
	ns := intents[0].Namespace
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE kind = 'Call'), count(*) FILTER (WHERE kind = 'Task') FROM records WHERE namespace = $1`, ns).Scan(&callRows, &taskRows); err != nil {
		t.Fatal(err)
	}
	if callRows != calls || taskRows != 1 {
		var rows []string
		if res, err := conn.Query(t.Context(), `SELECT kind, namespace, name, uid FROM records WHERE namespace = $1 ORDER BY seq`, ns); err == nil {
			for res.Next() {
				var kind, ns, name, uid string
				if res.Scan(&kind, &ns, &name, &uid) == nil {
					rows = append(rows, kind+" "+ns+"/"+name+" "+uid)
				}
			}
			res.Close()
		}
		t.Errorf("the archive holds %d call records and %d task records, want %d and 1: %v", callRows, taskRows, calls, rows)
	}
	if brk, n, err := a.Verify(t.Context(), taskUID); err != nil || brk != nil || n != calls+1 {
		t.Errorf("the task's chain: break %v, %d records, %v; want %d records and no break", brk, n, err, calls+1)
	}
}

// TestArchiveKillPointsLoseNoRecord ends the manager at each boundary of the
// record's life: after a call's record is stored and before its reconcile ends; after
// the task's history counts calls and before any is deleted; between a call's
// Approval and Execution deleted and its intent; after an expired task's record is
// stored and before the task is deleted. A manager started again finishes the run,
// and every promise of the pipeline holds, and every record is stored once.
func TestArchiveKillPointsLoseNoRecord(t *testing.T) {
	m := failpointManager(t, t.TempDir())
	server, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	for _, point := range failpoint.ArchivePoints {
		t.Run(point, func(t *testing.T) {
			run := newArchiveRun(t, server)
			ns := env.Namespace(t)
			r := record(t, ns)
			playKubelet(t, ns)
			newRoomyTask(t, ns, "kill")
			denyDeletes(t, ns)
			w := newWorkload(ns, "kill", 2)
			approveAsked(t, ns, w.denyAsked)

			spec := point + ":2"
			if point == failpoint.TaskRecordStored {
				spec = point // one task: its first hit
			}
			doomed := startProcess(t, m, spec, run.flags...)
			w.create(t)
			// The task's end is what the last point waits for: once every call is
			// observed, the task is marked done, whether the manager died or not.
			_ = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
				n, observed := r.Count()
				_, exited := doomed.exitCode(0)
				return exited || (n == len(w.intents) && observed == n), nil
			})
			markDone(t, ns, "kill")
			code, exited := doomed.exitCode(90 * time.Second)
			if !exited || code != failpoint.ExitCode {
				t.Fatalf("the manager with %s=%s did not end there (exited %v, code %d); its log:\n%s", failpoint.EnvVar, spec, exited, code, doomed.tail())
			}
			doomed.wantNoPanic(t)

			again := startProcess(t, m, "", run.flags...)
			waitTaskGone(t, ns, "kill", 90*time.Second, again)
			wantNoViolations(t, r)
			wantEveryRecordOnce(t, run, r, len(w.intents))
			again.stop(t)
		})
	}
}

// TestArchiveOutagesLoseNoRecord runs the workload while PostgreSQL is stopped
// for 30 seconds (every call is observed meanwhile: no call waits for the
// archive), restarted under the manager, or slow (every insert takes 300 ms).
// Nothing leaves the cluster while the archive cannot say it holds it, and once it
// answers, every record is there once.
func TestArchiveOutagesLoseNoRecord(t *testing.T) {
	m := failpointManager(t, t.TempDir())
	faults := map[string]func(t *testing.T, server *pgtest.Server, run archiveRun, start func()){
		"stopped for 30 seconds": func(t *testing.T, server *pgtest.Server, _ archiveRun, start func()) {
			if err := server.Stop(); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now()
			start()
			// The outage is the fault itself, not a wait for a condition.
			time.Sleep(time.Until(stopped.Add(30 * time.Second)))
			if err := server.Restart(); err != nil {
				t.Fatal(err)
			}
		},
		"restarted": func(t *testing.T, server *pgtest.Server, _ archiveRun, start func()) {
			start()
			if err := server.Restart(); err != nil {
				t.Fatal(err)
			}
		},
		"slow": func(t *testing.T, _ *pgtest.Server, run archiveRun, start func()) {
			a, err := archive.Open(t.Context(), run.dsn) // the schema, for the trigger
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Has(t.Context(), "none"); err != nil {
				t.Fatal(err)
			}
			a.Close()
			conn, err := pgx.Connect(t.Context(), run.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close(context.Background()) }()
			if _, err := conn.Exec(t.Context(), `
				CREATE FUNCTION slow_insert() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN NEW; END $$ LANGUAGE plpgsql;
				CREATE TRIGGER slow_insert BEFORE INSERT ON records FOR EACH ROW EXECUTE FUNCTION slow_insert();`); err != nil {
				t.Fatal(err)
			}
			start()
		},
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			server, err := pgtest.Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = server.Close() })
			run := newArchiveRun(t, server)
			ns := env.Namespace(t)
			r := record(t, ns)
			playKubelet(t, ns)
			newRoomyTask(t, ns, "outage")
			denyDeletes(t, ns)
			w := newWorkload(ns, "outage", 2)
			approveAsked(t, ns, w.denyAsked)
			p := startProcess(t, m, "", run.flags...)
			fault(t, server, run, func() {
				w.create(t)
				waitObservedOr(t, r, len(w.intents), 90*time.Second, p)
			})
			markDone(t, ns, "outage")
			waitTaskGone(t, ns, "outage", 3*time.Minute, p)
			wantNoViolations(t, r)
			wantEveryRecordOnce(t, run, r, len(w.intents))
			p.stop(t)
		})
	}
}
