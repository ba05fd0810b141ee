-- Reads by name (the archive's API: a namespace's call or task of a name) go
-- through an index, newest record first, as reads by task do through records_task.
-- Built CONCURRENTLY, outside a transaction: an archive that already holds years
-- of records keeps taking new ones while the index is built.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS records_name ON records (namespace, kind, name, seq DESC);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS records_name;
