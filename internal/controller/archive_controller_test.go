package controller

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
	"github.com/toolgate/toolgate/internal/testing/pgtest"
)

// archiveServer is a PostgreSQL started the first time a test needs one and
// stopped when the package's tests end (TestMain).
var (
	archiveServer     *pgtest.Server
	archiveServerOnce sync.Once
	archiveServerErr  error
)

func sharedArchiveServer(t *testing.T) *pgtest.Server {
	t.Helper()
	archiveServerOnce.Do(func() { archiveServer, archiveServerErr = pgtest.Start() })
	if archiveServerErr != nil {
		t.Fatal(archiveServerErr)
	}
	return archiveServer
}

// openArchive opens a new archive in a database of its own on server.
func openArchive(t *testing.T, server *pgtest.Server) *archive.Archive {
	t.Helper()
	a, err := archive.Open(t.Context(), server.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// startArchiving starts the intent pipeline and the archiver in ns.
func startArchiving(t *testing.T, ns string, a *archive.Archive) {
	t.Helper()
	startManagerIn(t, ns, setupIndexes, setupToolIntent, func(mgr ctrl.Manager, opts Options) error {
		opts.Archive = a
		return setupArchive(mgr, opts)
	})
}

// refusedCall creates a call of a task that does not exist: validation refuses it,
// and it is observed at once, a finished call like any other.
func refusedCall(t *testing.T, ns, task string) *v1.ToolIntent {
	t.Helper()
	intent := fixtures.ToolIntent(ns, task, 0, 0, v1.ToolReadFile, `{"path":"README.md"}`, "agent")
	if err := env.Client.Create(t.Context(), intent); err != nil {
		t.Fatal(err)
	}
	return intent
}

// archived says whether a holds the intent's record.
func archived(t *testing.T, a *archive.Archive, intent *v1.ToolIntent) (bool, string) {
	t.Helper()
	stored, err := a.Has(t.Context(), string(intent.UID))
	return stored, fmt.Sprintf("stored %v, %v", stored, err)
}

func TestFinishedCallsAreArchived(t *testing.T) {
	ns := env.Namespace(t)
	a := openArchive(t, sharedArchiveServer(t))
	startArchiving(t, ns, a)
	intent := refusedCall(t, ns, "gone")
	eventually(t, "the call archived", func() (bool, string) { return archived(t, a, intent) })

	got := &v1.ToolIntent{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(intent), got); err != nil {
		t.Fatal(err)
	}
	page, err := a.TaskRecords(t.Context(), "none/"+ns+"/gone", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 1 {
		t.Fatalf("%d records of the call, want 1", len(page.Records))
	}
	r := page.Records[0]
	if r.UID != string(got.UID) || r.Name != intent.Name || r.Kind != archive.KindCall || !strings.Contains(string(r.Body), `"outcome": "ValidationFailed"`) {
		t.Fatalf("record %+v (body %s) is not the refused call's", r, r.Body)
	}
	if brk, n, err := a.Verify(t.Context(), r.TaskUID); err != nil || brk != nil || n != 1 {
		t.Fatalf("Verify = %v, %d, %v", brk, n, err)
	}
}

// A record names the versions of the objects it was built from, and the
// archiver writes nothing to the cluster: the intent keeps the version its record
// was built from, which is what retention compares and deletes by. A label that
// earlier controllers set once the record was stored, set by a proposer before the
// call is observed, neither keeps the call out of the archive nor enters its record.
func TestARecordNamesTheVersionsItWasBuiltFrom(t *testing.T) {
	ns := env.Namespace(t)
	a := openArchive(t, sharedArchiveServer(t))
	startArchiving(t, ns, a)
	intent := fixtures.ToolIntent(ns, "gone", 0, 0, v1.ToolReadFile, `{"path":"README.md"}`, "agent")
	intent.Labels = map[string]string{"toolgate.dev/archived": "true"}
	if err := env.Client.Create(t.Context(), intent); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the call stored", func() (bool, string) { return archived(t, a, intent) })
	got := &v1.ToolIntent{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(intent), got); err != nil {
		t.Fatal(err)
	}
	held, err := a.Current(t.Context(), []string{string(got.UID), "no-such-uid"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (archive.Versions{Object: got.ResourceVersion}); len(held) != 1 || held[string(got.UID)] != want {
		t.Fatalf("the archive holds versions %+v; want only the intent's, %+v (the archiver must not change the intent after its record)", held, want)
	}
	rec, err := a.Named(t.Context(), archive.KindCall, ns, got.Name)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(rec.Body), "toolgate.dev/archived") {
		t.Fatalf("the record carries the old archived label: %s", rec.Body)
	}
}

// An archive that is down delays the record and loses nothing: the call is not
// stored while the archive is down, and is stored once the archive answers.
func TestAnArchiveDownDelaysTheRecordAndLosesNothing(t *testing.T) {
	ns := env.Namespace(t)
	server, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	a := openArchive(t, server)
	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	failures := testutil.ToFloat64(metrics.ArchiveFailures)
	startArchiving(t, ns, a)
	intent := refusedCall(t, ns, "gone")
	eventually(t, "a failed store", func() (bool, string) {
		n := testutil.ToFloat64(metrics.ArchiveFailures)
		return n > failures, fmt.Sprint(n)
	})
	if ok, state := archived(t, a, intent); ok {
		t.Fatalf("stored while the archive is down: %s", state)
	}
	if err := server.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the call archived once the archive is back", func() (bool, string) { return archived(t, a, intent) })
	got := &v1.ToolIntent{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(intent), got); err != nil {
		t.Fatal(err)
	}
	page, err := a.TaskRecords(t.Context(), "none/"+ns+"/gone", 0, 10)
	if err != nil || len(page.Records) != 1 || page.Records[0].UID != string(got.UID) {
		t.Fatalf("records after the outage: %+v, %v; want the call's one", page.Records, err)
	}
}
