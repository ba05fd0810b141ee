-- built_from holds the resourceVersions of the cluster objects a call's record was
-- built from ({"object": ..., "approval": ..., "execution": ...}). It is no part of
-- the record or its hash: it says which versions of the objects the record is a
-- copy of, so that retention can tell the record is current by comparing versions
-- and delete exactly those versions, without reading every object again. Records
-- stored before it have '{}', which matches no version: they are confirmed the
-- long way (built again and compared), which fills it in.

-- +goose Up
ALTER TABLE records ADD COLUMN built_from jsonb NOT NULL DEFAULT '{}'::jsonb;

-- +goose Down
ALTER TABLE records DROP COLUMN built_from;
