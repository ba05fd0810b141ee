-- Reads by name (the archive's API: a namespace's call or task of a name) go
-- through an index, newest record first, as reads by task do through records_task.

-- +goose Up
CREATE INDEX records_name ON records (namespace, kind, name, seq DESC);

-- +goose Down
DROP INDEX records_name;
