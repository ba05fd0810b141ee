// Package archive is toolgate's durable record: every finished call and task,
// stored in PostgreSQL once (keyed by the object's UID), each record chained by
// SHA-256 to the record of its task stored before it, so that a changed or removed
// record is found (Verify). Records are written off the call's critical path and
// read back in pages; the schema is versioned in migrations/, applied by goose.
package archive

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Kind is what a record is of.
type Kind string

const (
	// KindCall is a finished ToolIntent with its Approval and Execution.
	KindCall Kind = "Call"
	// KindTask is a finished AgentTask.
	KindTask Kind = "Task"
)

// Record is one stored record.
type Record struct {
	// UID is the UID of the object recorded (the ToolIntent, the AgentTask).
	UID       string
	Kind      Kind
	Namespace string
	Task      string
	TaskUID   string
	// Name is the recorded object's name.
	Name string
	// RecordedAt is when the record's object finished (observed, ended).
	RecordedAt time.Time
	// Body is the record's content, JSON.
	Body json.RawMessage
	// BuiltFrom names the versions of the cluster objects the record was built
	// from. It is no part of the record (nor of its hash): Store keeps the latest
	// versions a record was built from with the same content, and retention
	// compares them with the cluster's (Current).
	BuiltFrom Versions

	// Seq, SHA256 and PrevSHA256 are set by Store.
	Seq        int64
	SHA256     string
	PrevSHA256 string
}

// Versions are the resourceVersions of the objects a call's record was built
// from: the intent (or the task), its Approval and its Execution ("" for one it
// did not have).
type Versions struct {
	Object    string `json:"object,omitempty"`
	Approval  string `json:"approval,omitempty"`
	Execution string `json:"execution,omitempty"`
}

// Archive is a PostgreSQL database holding records.
type Archive struct {
	pool *pgxpool.Pool
	// schema guards migrated: the schema is brought up to date once, before the
	// first read or write, and again after a failed attempt.
	schema   sync.Mutex
	migrated bool
}

// New is the archive at dsn, without connecting: the controller starts whether or
// not its archive answers, and the schema is brought up to date before the first
// read or write that reaches it. A malformed dsn is an error.
func New(dsn string) (*Archive, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("archive: the connection string: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return &Archive{pool: pool}, nil
}

// Open is New, then the schema brought up to date now.
func Open(ctx context.Context, dsn string) (*Archive, error) {
	a, err := New(dsn)
	if err != nil {
		return nil, err
	}
	if err := a.ensureSchema(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// ensureSchema applies the migrations the database has not had, once.
func (a *Archive) ensureSchema(ctx context.Context) error {
	a.schema.Lock()
	defer a.schema.Unlock()
	if a.migrated {
		return nil
	}
	if err := migrate(ctx, a.pool); err != nil {
		return err
	}
	a.migrated = true
	return nil
}

// Close releases the connections.
func (a *Archive) Close() { a.pool.Close() }

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer func() { _ = db.Close() }()
	dir, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, dir)
	if err != nil {
		return fmt.Errorf("archive migrations: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("archive migrations: %w", err)
	}
	return nil
}

// ErrChanged: a record of that UID is stored with other content.
var ErrChanged = errors.New("a record of this UID is stored with other content")

// Store stores rec, chained to the last record of its task, and returns it as
// stored, and whether this call stored it. A record of rec's UID stored already is
// returned as it is (a second write of the same record stores nothing); stored
// with other content, it is ErrChanged. A record stored again with the same
// content and other BuiltFrom versions keeps the new versions: the objects at
// those versions hold the same record. Records of one task are stored one at a
// time (a transaction lock on the task), so the chain never forks.
func (a *Archive) Store(ctx context.Context, rec Record) (Record, bool, error) {
	if err := a.ensureSchema(ctx); err != nil {
		return Record{}, false, err
	}
	var stored Record
	var created bool
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, rec.TaskUID); err != nil {
			return err
		}
		// The canonical body is PostgreSQL's own text of the jsonb value (keys in
		// its order, its spacing): what is hashed is what a reader of the row can
		// make again from it, whatever form the body was given in.
		var canon string
		if err := tx.QueryRow(ctx, `SELECT $1::jsonb::text`, string(rec.Body)).Scan(&canon); err != nil {
			return fmt.Errorf("record %s/%s: the body is not JSON: %w", rec.Namespace, rec.Name, err)
		}
		existing, err := scanOne(tx.QueryRow(ctx, selectRecord+` WHERE uid = $1`, rec.UID))
		if err == nil {
			stored = existing
			// Retention deletes what the cluster holds only when this says the
			// archive holds the same: the stored row must also still match its own
			// hash (a row changed in place is no record of the call).
			if string(existing.Body) != canon || existing.TaskUID != rec.TaskUID || Hash(existing) != existing.SHA256 {
				return fmt.Errorf("%w: %s %s/%s", ErrChanged, rec.Kind, rec.Namespace, rec.Name)
			}
			if existing.BuiltFrom == rec.BuiltFrom {
				return nil
			}
			stored.BuiltFrom = rec.BuiltFrom
			_, err := tx.Exec(ctx, `UPDATE records SET built_from = $2 WHERE uid = $1`, rec.UID, rec.BuiltFrom)
			return err
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		prev := ""
		if err := tx.QueryRow(ctx, `SELECT sha256 FROM records WHERE task_uid = $1 ORDER BY seq DESC LIMIT 1`, rec.TaskUID).Scan(&prev); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		rec.RecordedAt = rec.RecordedAt.UTC().Truncate(time.Microsecond) // PostgreSQL's precision
		rec.Body, rec.PrevSHA256 = json.RawMessage(canon), prev
		rec.SHA256 = Hash(rec)
		err = tx.QueryRow(ctx, `INSERT INTO records (uid, kind, namespace, task, task_uid, name, recorded_at, body, sha256, prev_sha256, built_from)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING seq`,
			rec.UID, rec.Kind, rec.Namespace, rec.Task, rec.TaskUID, rec.Name, rec.RecordedAt, string(rec.Body), rec.SHA256, rec.PrevSHA256, rec.BuiltFrom).Scan(&rec.Seq)
		stored, created = rec, err == nil
		return err
	})
	return stored, created && err == nil, err
}

// Has says whether a record of that UID is stored.
func (a *Archive) Has(ctx context.Context, uid string) (bool, error) {
	if err := a.ensureSchema(ctx); err != nil {
		return false, err
	}
	var has bool
	err := a.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM records WHERE uid = $1)`, uid).Scan(&has)
	return has, err
}

// Current returns, of the records of those UIDs, the versions each was last
// built from, for the records that are whole (each still matches its own hash):
// a UID it leaves out has no record, or one changed in place, and is confirmed the
// long way (Store) or not at all. One query, by the uid index, for a task's
// retirable calls at once.
func (a *Archive) Current(ctx context.Context, uids []string) (map[string]Versions, error) {
	if len(uids) == 0 {
		return nil, nil
	}
	if err := a.ensureSchema(ctx); err != nil {
		return nil, err
	}
	rows, err := a.pool.Query(ctx, selectRecord+` WHERE uid = ANY($1)`, uids)
	if err != nil {
		return nil, err
	}
	records, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scanOne(row) })
	if err != nil {
		return nil, err
	}
	out := make(map[string]Versions, len(records))
	for _, r := range records {
		if Hash(r) == r.SHA256 {
			out[r.UID] = r.BuiltFrom
		}
	}
	return out, nil
}

const selectRecord = `SELECT seq, uid, kind, namespace, task, task_uid, name, recorded_at, body::text, sha256, prev_sha256, built_from FROM records`

func scanOne(row pgx.Row) (Record, error) {
	var r Record
	var body string
	err := row.Scan(&r.Seq, &r.UID, &r.Kind, &r.Namespace, &r.Task, &r.TaskUID, &r.Name, &r.RecordedAt, &body, &r.SHA256, &r.PrevSHA256, &r.BuiltFrom)
	r.Body = json.RawMessage(body)
	r.RecordedAt = r.RecordedAt.UTC()
	return r, err
}

// Page is a page of a task's records in the order they were stored.
type Page struct {
	Records []Record
	// Next is the cursor of the next page; 0 when this page is the last.
	Next int64
}

// TaskRecords reads up to limit records of the task whose UID is taskUID, stored
// after the record numbered after (0: from the first). Reads are by an index, never a
// count.
func (a *Archive) TaskRecords(ctx context.Context, taskUID string, after int64, limit int) (Page, error) {
	if err := a.ensureSchema(ctx); err != nil {
		return Page{}, err
	}
	rows, err := a.pool.Query(ctx, selectRecord+` WHERE task_uid = $1 AND seq > $2 ORDER BY seq LIMIT $3`, taskUID, after, limit+1)
	if err != nil {
		return Page{}, err
	}
	defer rows.Close()
	var page Page
	for rows.Next() {
		r, err := scanOne(rows)
		if err != nil {
			return Page{}, err
		}
		page.Records = append(page.Records, r)
	}
	if err := rows.Err(); err != nil {
		return Page{}, err
	}
	if len(page.Records) > limit {
		page.Records = page.Records[:limit]
		page.Next = page.Records[limit-1].Seq
	}
	return page, nil
}

// Hash is the SHA-256 of a record's canonical form: every stored field but seq
// and its own hash, with the body as PostgreSQL's text of it, and the hash of the
// record before it.
func Hash(r Record) string {
	canon, _ := json.Marshal(struct {
		UID        string          `json:"uid"`
		Kind       Kind            `json:"kind"`
		Namespace  string          `json:"namespace"`
		Task       string          `json:"task"`
		TaskUID    string          `json:"taskUID"`
		Name       string          `json:"name"`
		RecordedAt string          `json:"recordedAt"`
		Body       json.RawMessage `json:"body"`
		PrevSHA256 string          `json:"prevSHA256"`
	}{r.UID, r.Kind, r.Namespace, r.Task, r.TaskUID, r.Name, r.RecordedAt.UTC().Format(time.RFC3339Nano), r.Body, r.PrevSHA256})
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}
