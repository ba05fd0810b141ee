-- The archive's one table: a record per finished call (kind Call) or task (kind
-- Task), each chained to the record of its task stored before it.

-- +goose Up
CREATE TABLE records (
    -- seq orders the records of a task (a chain is walked by it), and pages reads.
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- uid is the object's UID: a record is stored once, however often it is written.
    uid          text        NOT NULL UNIQUE,
    kind         text        NOT NULL CHECK (kind IN ('Call', 'Task')),
    namespace    text        NOT NULL,
    task         text        NOT NULL,
    task_uid     text        NOT NULL,
    name         text        NOT NULL,
    recorded_at  timestamptz NOT NULL,
    body         jsonb       NOT NULL,
    -- sha256 is the hash of the record's canonical form, which includes
    -- prev_sha256: the hash of the record of the same task stored before it ('' for
    -- the first).
    sha256       text        NOT NULL,
    prev_sha256  text        NOT NULL
);

-- A task's chain, and its calls in order.
CREATE INDEX records_task ON records (task_uid, seq);
-- A namespace's records, newest first.
CREATE INDEX records_namespace ON records (namespace, recorded_at DESC, seq DESC);
-- Queries into the record's content (who approved, which rule decided).
CREATE INDEX records_body ON records USING gin (body jsonb_path_ops);

-- +goose Down
DROP TABLE records;
