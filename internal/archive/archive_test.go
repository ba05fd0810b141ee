package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/internal/leakcheck"
	"github.com/toolgate/toolgate/internal/testing/pgtest"
)

var server *pgtest.Server

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(func() int {
		var err error
		if server, err = pgtest.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = server.Close() }()
		return m.Run()
	}))
}

// open opens a new, empty archive for the test.
func open(t *testing.T) (*Archive, string) {
	t.Helper()
	dsn := server.NewDatabase(t)
	a, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, dsn
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func call(task, name string, i int) Record {
	return Record{
		UID: "uid-" + name, Kind: KindCall, Namespace: "team-a", Task: task, TaskUID: "task-" + task, Name: name,
		RecordedAt: epoch.Add(time.Duration(i) * time.Second),
		Body:       json.RawMessage(fmt.Sprintf(`{"intent":{"name":%q,"tool":"bash"},"observation":{"outcome":"Succeeded","exitCode":%d}}`, name, i)),
	}
}

func store(t *testing.T, a *Archive, r Record) Record {
	t.Helper()
	stored, _, err := a.Store(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	return stored
}

func all(t *testing.T, a *Archive, taskUID string) []Record {
	t.Helper()
	page, err := a.TaskRecords(t.Context(), taskUID, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return page.Records
}

func TestStoreChainsEachTasksRecords(t *testing.T) {
	a, _ := open(t)
	store(t, a, call("a", "a-t0-0", 0))
	store(t, a, call("b", "b-t0-0", 1))
	store(t, a, call("a", "a-t1-0", 2))
	store(t, a, call("a", "a-t2-0", 3))
	got := all(t, a, "task-a")
	if len(got) != 3 {
		t.Fatalf("task a has %d records, want 3", len(got))
	}
	if got[0].PrevSHA256 != "" || got[1].PrevSHA256 != got[0].SHA256 || got[2].PrevSHA256 != got[1].SHA256 {
		t.Fatalf("task a's records are not chained in order: %+v", got)
	}
	if b := all(t, a, "task-b"); len(b) != 1 || b[0].PrevSHA256 != "" {
		t.Fatalf("task b's chain does not start on its own: %+v", b)
	}
	if !got[0].RecordedAt.Equal(epoch.Truncate(time.Microsecond)) {
		t.Errorf("recordedAt = %s, want %s", got[0].RecordedAt, epoch)
	}
	if brk, n, err := a.Verify(t.Context(), "task-a"); err != nil || brk != nil || n != 3 {
		t.Fatalf("Verify = %v, %d, %v; want a whole chain of 3", brk, n, err)
	}
}

func TestStoreIsIdempotent(t *testing.T) {
	a, _ := open(t)
	first, created, err := a.Store(t.Context(), call("a", "a-t0-0", 0))
	if err != nil || !created {
		t.Fatalf("the first write: created %t, err %v", created, err)
	}
	// The same record again, its body written in another form (key order, space):
	// stored once.
	again := call("a", "a-t0-0", 0)
	again.Body = json.RawMessage(`{ "observation": {"exitCode": 0, "outcome": "Succeeded"}, "intent": {"tool": "bash", "name": "a-t0-0"} }`)
	second, created, err := a.Store(t.Context(), again)
	if err != nil || created || second.Seq != first.Seq || second.SHA256 != first.SHA256 {
		t.Fatalf("a second write stored another record: %+v then %+v", first, second)
	}
	if n := len(all(t, a, "task-a")); n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
	if has, err := a.Has(t.Context(), "uid-a-t0-0"); err != nil || !has {
		t.Fatalf("Has(a stored record) = %t, %v", has, err)
	}
	if has, err := a.Has(t.Context(), "uid-never"); err != nil || has {
		t.Fatalf("Has(a record never stored) = %t, %v", has, err)
	}
	changed := call("a", "a-t0-0", 0)
	changed.Body = json.RawMessage(`{"intent":{"name":"a-t0-0","tool":"bash"},"observation":{"outcome":"Failed"}}`)
	if _, _, err := a.Store(t.Context(), changed); !errors.Is(err, ErrChanged) {
		t.Fatalf("another content under a stored UID: err = %v, want ErrChanged", err)
	}
	if _, _, err := a.Store(t.Context(), Record{UID: "x", Kind: KindCall, TaskUID: "task-a", Body: json.RawMessage(`{not json`)}); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("a body that is not JSON: err = %v", err)
	}
}

func TestVerifyFindsAChangedByte(t *testing.T) {
	for _, tc := range []struct {
		name, sql, want string
		at              int // index of the record the break is found at
	}{
		{name: "a changed output", sql: `UPDATE records SET body = jsonb_set(body, '{observation,exitCode}', '7') WHERE name = 'a-t1-0'`, want: "changed after it was stored", at: 1},
		{name: "a changed time", sql: `UPDATE records SET recorded_at = recorded_at + interval '1 microsecond' WHERE name = 'a-t2-0'`, want: "changed after it was stored", at: 2},
		{name: "a record removed", sql: `DELETE FROM records WHERE name = 'a-t1-0'`, want: "a record before it was removed", at: 2},
		{name: "a record rehashed to hide a change", sql: `UPDATE records SET body = jsonb_set(body, '{observation,outcome}', '"Denied"'), sha256 = 'x' WHERE name = 'a-t0-0'`, want: "changed after it was stored", at: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, dsn := open(t)
			var recs []Record
			for i := range 4 {
				recs = append(recs, store(t, a, call("a", fmt.Sprintf("a-t%d-0", i), i)))
			}
			conn, err := pgx.Connect(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close(context.Background()) }()
			if _, err := conn.Exec(t.Context(), tc.sql); err != nil {
				t.Fatal(err)
			}
			brk, _, err := a.Verify(t.Context(), "task-a")
			if err != nil {
				t.Fatal(err)
			}
			if brk == nil || brk.Seq != recs[tc.at].Seq || !strings.Contains(brk.Error(), tc.want) {
				t.Fatalf("Verify = %v; want a break at record %d (%s): %s", brk, recs[tc.at].Seq, recs[tc.at].Name, tc.want)
			}
		})
	}
}

// Writers racing on one task (two controller replicas, retries) never fork its
// chain: every record follows exactly one other.
func TestStoreNeverForksAChain(t *testing.T) {
	a, _ := open(t)
	const writers, each = 6, 15
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := call("a", fmt.Sprintf("a-w%d-%d", w, i), i)
				// Every record is written twice, as a retry would.
				for range 2 {
					if _, _, err := a.Store(t.Context(), r); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	brk, n, err := a.Verify(t.Context(), "task-a")
	if err != nil || brk != nil || n != writers*each {
		t.Fatalf("Verify = %v, %d, %v; want one whole chain of %d", brk, n, err, writers*each)
	}
}

func TestTaskRecordsArePaged(t *testing.T) {
	a, _ := open(t)
	for i := range 5 {
		store(t, a, call("a", fmt.Sprintf("a-t%d-0", i), i))
	}
	var names []string
	var after int64
	pages := 0
	for {
		page, err := a.TaskRecords(t.Context(), "task-a", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range page.Records {
			names = append(names, r.Name)
		}
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	if got := strings.Join(names, ","); got != "a-t0-0,a-t1-0,a-t2-0,a-t3-0,a-t4-0" || pages != 3 {
		t.Fatalf("pages %d: %s", pages, got)
	}
}

// Opening an archive whose schema is up to date changes nothing: every replica of
// the controller opens it at start.
func TestOpenAgainKeepsTheRecords(t *testing.T) {
	a, dsn := open(t)
	store(t, a, call("a", "a-t0-0", 0))
	again, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if n := len(all(t, again, "task-a")); n != 1 {
		t.Fatalf("%d records after opening again, want 1", n)
	}
}

// A record names the versions it was built from; stored again with the same
// content from other versions, it takes them (the objects at those versions hold
// the same record) and stores nothing else. Current reads them for whole records
// only: a UID never stored, or a row changed in place, is left out, so retention
// confirms it the long way or not at all.
func TestCurrentNamesTheVersionsOfWholeRecords(t *testing.T) {
	a, dsn := open(t)
	first := call("a", "a-t0-0", 0)
	first.BuiltFrom = Versions{Object: "10", Execution: "11"}
	store(t, a, first)
	store(t, a, call("a", "a-t0-1", 1)) // stored without versions

	held, err := a.Current(t.Context(), []string{"uid-a-t0-0", "uid-a-t0-1", "uid-never"})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 2 || held["uid-a-t0-0"] != first.BuiltFrom || held["uid-a-t0-1"] != (Versions{}) {
		t.Fatalf("Current = %+v; want the first record's versions and the second's none", held)
	}

	again := call("a", "a-t0-0", 0)
	again.BuiltFrom = Versions{Object: "12", Execution: "11"}
	stored, created, err := a.Store(t.Context(), again)
	if err != nil || created || stored.BuiltFrom != again.BuiltFrom {
		t.Fatalf("the same record from newer versions: created %t, versions %+v, err %v", created, stored.BuiltFrom, err)
	}
	if held, err = a.Current(t.Context(), []string{"uid-a-t0-0"}); err != nil || held["uid-a-t0-0"] != again.BuiltFrom {
		t.Fatalf("Current after the record was built again = %+v, %v; want %+v", held, err, again.BuiltFrom)
	}
	if n := len(all(t, a, "task-a")); n != 2 {
		t.Fatalf("%d records, want 2: a record built again is stored once", n)
	}
	if brk, n, err := a.Verify(t.Context(), "task-a"); err != nil || brk != nil || n != 2 {
		t.Fatalf("the versions are no part of the chain: Verify = %+v, %d, %v", brk, n, err)
	}

	// Changed in place: no longer whole, so no versions vouch for it.
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(t.Context()) }()
	if _, err := conn.Exec(t.Context(), `UPDATE records SET body = jsonb_set(body, '{observation,exitCode}', '7') WHERE uid = 'uid-a-t0-0'`); err != nil {
		t.Fatal(err)
	}
	if held, err = a.Current(t.Context(), []string{"uid-a-t0-0", "uid-a-t0-1"}); err != nil || len(held) != 1 {
		t.Fatalf("Current after a record changed in place = %+v, %v; want the other record only", held, err)
	}
	if held, err = a.Current(t.Context(), nil); err != nil || len(held) != 0 {
		t.Fatalf("Current(none) = %+v, %v", held, err)
	}
}
