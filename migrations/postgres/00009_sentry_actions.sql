-- Sentry remediation: the key each source signs its events with, and what
-- the gateway did about each remediating event (store.SentryKey,
-- store.SentryAction). The schema is ours.

-- +goose Up

-- A source's Ed25519 public key: once it has one, its events must be
-- signed. Replaced in place; deleting it lifts the requirement.
CREATE TABLE sentry_keys (
    source     TEXT        NOT NULL,
    public_key BYTEA       NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    created_by TEXT        NOT NULL,
    CONSTRAINT sentry_keys_pkey PRIMARY KEY (source)
);

-- One action per remediating event, (source, event_id) its key (the
-- unique constraint's index also finds an event's action). version: the
-- policy version the action committed (0: none). acked_at: when the
-- sandbox's proxies applied it; decided_by and decided_at: the operator
-- who answered a held action. Actions outlive their sandbox: no foreign
-- key, nothing cascades.
CREATE TABLE sentry_actions (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY,
    source      TEXT        NOT NULL,
    event_id    TEXT        NOT NULL,
    sandbox     TEXT        NOT NULL,
    type        TEXT        NOT NULL DEFAULT '',
    status      TEXT        NOT NULL,
    reason      TEXT        NOT NULL DEFAULT '',
    version     BIGINT      NOT NULL DEFAULT 0,
    received_at TIMESTAMPTZ NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    acked_at    TIMESTAMPTZ,
    decided_by  TEXT        NOT NULL DEFAULT '',
    decided_at  TIMESTAMPTZ,
    CONSTRAINT sentry_actions_pkey PRIMARY KEY (id),
    CONSTRAINT sentry_actions_event_key UNIQUE (source, event_id),
    CONSTRAINT sentry_actions_status_check CHECK (status IN
        ('frozen', 'held', 'dry_run', 'already_frozen', 'failed', 'dismissed', 'applied')),
    CONSTRAINT sentry_actions_version_check CHECK (version >= 0)
);
-- A sandbox's actions, newest first; the actions of some statuses since a
-- time (the quarantine circuit breaker, the held ones awaiting an answer).
CREATE INDEX sentry_actions_sandbox_idx ON sentry_actions (sandbox, created_at);
CREATE INDEX sentry_actions_status_idx ON sentry_actions (status, created_at);

-- The replay lookup (an event of a source by sequence) is served by
-- sentry_events_source_idx (00007).

-- +goose Down
DROP TABLE sentry_actions;
DROP TABLE sentry_keys;
