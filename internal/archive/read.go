package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrNotFound: no record answers the read.
var ErrNotFound = errors.New("no such record in the archive")

// Named reads the latest record of kind in namespace whose recorded object is
// called name: a name can come back (a task made again under the same name), and
// the newest record is the one a person asking by name means. Every read is
// bounded to one namespace, so a reader allowed one namespace never reads another's.
func (a *Archive) Named(ctx context.Context, kind Kind, namespace, name string) (Record, error) {
	if err := a.ensureSchema(ctx); err != nil {
		return Record{}, err
	}
	r, err := scanOne(a.pool.QueryRow(ctx, selectRecord+` WHERE namespace = $1 AND kind = $2 AND name = $3 ORDER BY seq DESC LIMIT 1`, namespace, kind, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("%w: %s %s/%s", ErrNotFound, kind, namespace, name)
	}
	return r, err
}

// Calls reads up to limit call records of the task whose UID is taskUID, in the
// order they were stored, after the record numbered after (0: from the first),
// in namespace only: a task UID of another namespace reads nothing. Paged by seq
// through records_task, never by OFFSET.
func (a *Archive) Calls(ctx context.Context, namespace, taskUID string, after int64, limit int) (Page, error) {
	if err := a.ensureSchema(ctx); err != nil {
		return Page{}, err
	}
	rows, err := a.pool.Query(ctx, selectRecord+` WHERE task_uid = $1 AND seq > $2 AND namespace = $3 AND kind = $4 ORDER BY seq LIMIT $5`,
		taskUID, after, namespace, KindCall, limit+1)
	if err != nil {
		return Page{}, err
	}
	records, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scanOne(row) })
	if err != nil {
		return Page{}, err
	}
	page := Page{Records: records}
	if len(records) > limit {
		page.Records = records[:limit]
		page.Next = records[limit-1].Seq
	}
	return page, nil
}

// ChainOf says whether the chain of taskUID belongs to the task called task in
// namespace (its first record says so): a verify read names the task by its
// namespace and name, and must not walk another namespace's chain.
func (a *Archive) ChainOf(ctx context.Context, namespace, task, taskUID string) (bool, error) {
	if err := a.ensureSchema(ctx); err != nil {
		return false, err
	}
	var ns, name string
	err := a.pool.QueryRow(ctx, `SELECT namespace, task FROM records WHERE task_uid = $1 ORDER BY seq LIMIT 1`, taskUID).Scan(&ns, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil && ns == namespace && name == task, err
}

// Verification is what a walk of a task's chain found.
type Verification struct {
	// Checked is how many records were checked, in the order they were stored.
	Checked int
	// Last is the hash of the last record checked: what an outside copy compares
	// with, when the chain holds.
	Last string
	// Break is where the chain breaks; nil when it holds.
	Break *Break
}

// VerifyChain is Verify, with the hash of the last record it checked: the reader
// who is told the chain holds is told which head it holds up to, so that records
// stored during the walk are not taken as checked.
func (a *Archive) VerifyChain(ctx context.Context, taskUID string) (Verification, error) {
	var v Verification
	var after int64
	for {
		page, err := a.TaskRecords(ctx, taskUID, after, verifyPage)
		if err != nil {
			return v, err
		}
		for _, r := range page.Records {
			if v.Break = checkLink(r, v.Last); v.Break != nil {
				return v, nil
			}
			v.Last, v.Checked = r.SHA256, v.Checked+1
		}
		if page.Next == 0 {
			return v, nil
		}
		after = page.Next
	}
}
