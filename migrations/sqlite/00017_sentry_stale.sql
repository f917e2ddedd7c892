-- A remediating Sentry event whose own time is older than the gateway's
-- --sentry-max-age (or too far ahead) is recorded, not acted on: its
-- action's status is stale (issue 37).
--
-- SQLite cannot alter a CHECK constraint: the table is rebuilt as in
-- 00008 (new table, copy, drop, rename, indexes again). Nothing refers to
-- sentry_actions. Ids are copied and the AUTOINCREMENT counter carried
-- over, so an id is still never reused.

-- +goose Up
CREATE TABLE sentry_actions_new (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    sandbox     TEXT    NOT NULL,
    type        TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL CHECK (status IN
        ('frozen', 'held', 'dry_run', 'already_frozen', 'failed', 'dismissed', 'applied', 'stale')),
    reason      TEXT    NOT NULL DEFAULT '',
    version     INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    received_at INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    acked_at    INTEGER,
    decided_by  TEXT    NOT NULL DEFAULT '',
    decided_at  INTEGER,
    UNIQUE (source, event_id)
) STRICT;
INSERT INTO sentry_actions_new (id, source, event_id, sandbox, type, status, reason, version, received_at, created_at, acked_at, decided_by, decided_at)
    SELECT id, source, event_id, sandbox, type, status, reason, version, received_at, created_at, acked_at, decided_by, decided_at FROM sentry_actions;
DELETE FROM sqlite_sequence WHERE name = 'sentry_actions_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'sentry_actions_new', seq FROM sqlite_sequence WHERE name = 'sentry_actions';
DROP TABLE sentry_actions;
ALTER TABLE sentry_actions_new RENAME TO sentry_actions;
CREATE INDEX sentry_actions_sandbox_idx ON sentry_actions (sandbox, created_at);
CREATE INDEX sentry_actions_status_idx ON sentry_actions (status, created_at);

-- +goose Down
-- The older schema has no stale: such an action froze nothing, as a
-- failed one, and keeps its reason.
CREATE TABLE sentry_actions_old (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    sandbox     TEXT    NOT NULL,
    type        TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL CHECK (status IN
        ('frozen', 'held', 'dry_run', 'already_frozen', 'failed', 'dismissed', 'applied')),
    reason      TEXT    NOT NULL DEFAULT '',
    version     INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    received_at INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    acked_at    INTEGER,
    decided_by  TEXT    NOT NULL DEFAULT '',
    decided_at  INTEGER,
    UNIQUE (source, event_id)
) STRICT;
INSERT INTO sentry_actions_old (id, source, event_id, sandbox, type, status, reason, version, received_at, created_at, acked_at, decided_by, decided_at)
    SELECT id, source, event_id, sandbox, type, CASE status WHEN 'stale' THEN 'failed' ELSE status END, reason, version, received_at, created_at, acked_at, decided_by, decided_at FROM sentry_actions;
DELETE FROM sqlite_sequence WHERE name = 'sentry_actions_old';
INSERT INTO sqlite_sequence (name, seq) SELECT 'sentry_actions_old', seq FROM sqlite_sequence WHERE name = 'sentry_actions';
DROP TABLE sentry_actions;
ALTER TABLE sentry_actions_old RENAME TO sentry_actions;
CREATE INDEX sentry_actions_sandbox_idx ON sentry_actions (sandbox, created_at);
CREATE INDEX sentry_actions_status_idx ON sentry_actions (status, created_at);
