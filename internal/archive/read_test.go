package archive

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestReads: reads by name and by task stay in their namespace, page by seq and
// return the newest record of a name.
func TestReads(t *testing.T) {
	a, _ := open(t)
	for i := range 5 {
		store(t, a, call("fix", fmt.Sprintf("fix-%d", i), i))
	}
	other := call("fix", "fix-other", 9)
	other.UID, other.Namespace = "uid-other-ns", "team-b"
	store(t, a, other)

	var names []string
	var after int64
	for pages := 0; ; pages++ {
		page, err := a.Calls(t.Context(), "team-a", "task-fix", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			names = append(names, r.Name)
		}
		if page.Next == 0 {
			if pages != 2 {
				t.Errorf("5 records in pages of 2 took %d pages, want 3", pages+1)
			}
			break
		}
		after = page.Next
	}
	if fmt.Sprint(names) != "[fix-0 fix-1 fix-2 fix-3 fix-4]" {
		t.Errorf("calls of team-a = %v: team-b's record of the same task UID must not be read", names)
	}
	if page, err := a.Calls(t.Context(), "team-b", "task-fix", 0, 10); err != nil || len(page.Records) != 1 {
		t.Errorf("team-b reads %d records (%v), want its 1", len(page.Records), err)
	}

	got, err := a.Named(t.Context(), KindCall, "team-a", "fix-3")
	if err != nil || got.UID != "uid-fix-3" {
		t.Errorf("Named(fix-3) = %s, %v", got.UID, err)
	}
	if _, err := a.Named(t.Context(), KindCall, "team-a", "fix-other"); !errors.Is(err, ErrNotFound) {
		t.Errorf("team-b's call read through team-a: %v, want ErrNotFound", err)
	}
	if _, err := a.Named(t.Context(), KindTask, "team-a", "fix-3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a call read as a task: %v, want ErrNotFound", err)
	}

	for _, c := range []struct {
		ns, task string
		want     bool
	}{{"team-a", "fix", true}, {"team-b", "fix", false}, {"team-a", "other", false}} {
		if ok, err := a.ChainOf(t.Context(), c.ns, c.task, "task-fix"); err != nil || ok != c.want {
			t.Errorf("ChainOf(%s, %s) = %v, %v; want %v", c.ns, c.task, ok, err, c.want)
		}
	}
}

// TestReadByNameUsesItsIndex: the read by name is answered through records_name,
// not by scanning a namespace's records.
func TestReadByNameUsesItsIndex(t *testing.T) {
	a, _ := open(t)
	store(t, a, call("fix", "fix-0", 0))
	tx, err := a.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(t.Context()) }()
	// With a handful of rows the planner would rather scan: forbid it, as a large
	// table does.
	if _, err := tx.Exec(t.Context(), `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(t.Context(), `EXPLAIN `+selectRecord+` WHERE namespace = $1 AND kind = $2 AND name = $3 ORDER BY seq DESC LIMIT 1`, "team-a", KindCall, "fix-0")
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if !strings.Contains(strings.Join(plan, "\n"), "records_name") {
		t.Errorf("the read by name does not use records_name:\n%s", strings.Join(plan, "\n"))
	}
}
