-- Sentry remediation: the key each source signs its events with, and what
-- the gateway did about each remediating event (store.SentryKey,
-- store.SentryAction). The schema is ours.
--
-- Times are INTEGER nanoseconds since the Unix epoch, UTC, NULL for none,
-- as in 00001_initial.sql.

-- +goose Up

-- A source's Ed25519 public key: once it has one, its events must be
-- signed. Replaced in place; deleting it lifts the requirement.
CREATE TABLE sentry_keys (
    source     TEXT    NOT NULL PRIMARY KEY,
    public_key BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    created_by TEXT    NOT NULL
) STRICT;

-- One action per remediating event, (source, event_id) its key (the
-- unique index also finds an event's action). version: the policy version
-- the action committed (0: none). acked_at: when the sandbox's proxies
-- applied it; decided_by and decided_at: the operator who answered a held
-- action. Actions outlive their sandbox: no foreign key, nothing
-- cascades. AUTOINCREMENT: an id is never reused.
CREATE TABLE sentry_actions (
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
-- A sandbox's actions, newest first; the actions of some statuses since a
-- time (the quarantine circuit breaker, the held ones awaiting an answer).
CREATE INDEX sentry_actions_sandbox_idx ON sentry_actions (sandbox, created_at);
CREATE INDEX sentry_actions_status_idx ON sentry_actions (status, created_at);

-- The replay lookup (an event of a source by sequence) is served by
-- sentry_events_source_idx (00007).

-- +goose Down
DROP TABLE sentry_actions;
DROP TABLE sentry_keys;
