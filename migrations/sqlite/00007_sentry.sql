-- Sentry events: watchdog reports, stored durably, idempotently and in
-- order per source (see store.SentryEvent). The schema is ours.

-- +goose Up

-- Times are UTC nanoseconds; flags are a JSON array; the document is the
-- event's JSON, verbatim. (source, id) is the idempotency key.
CREATE TABLE sentry_events (
    source      TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    sequence    INTEGER NOT NULL DEFAULT 0 CHECK (sequence >= 0),
    type        TEXT    NOT NULL DEFAULT '',
    subject     TEXT    NOT NULL DEFAULT '',
    event_time  INTEGER NOT NULL,
    received_at INTEGER NOT NULL,
    severity    TEXT    NOT NULL DEFAULT '',
    processing  TEXT    NOT NULL DEFAULT '',
    policy_hash TEXT    NOT NULL DEFAULT '',
    denial_id   TEXT    NOT NULL DEFAULT '',
    trace_id    TEXT    NOT NULL DEFAULT '',
    flags       TEXT    NOT NULL DEFAULT '[]',
    document    BLOB    NOT NULL,
    PRIMARY KEY (source, id)
);
-- A source's stream (gaps; not a partial index: the gaps query compares
-- sequence with a parameter, which a partial index's predicate cannot
-- be proved from); a sandbox's events in time order; filters;
-- retention by age.
CREATE INDEX sentry_events_source_idx ON sentry_events (source, sequence);
CREATE INDEX sentry_events_subject_idx ON sentry_events (subject, event_time);
CREATE INDEX sentry_events_time_idx ON sentry_events (event_time);
CREATE INDEX sentry_events_received_at_idx ON sentry_events (received_at);

-- Each source's ordering state: 1..acked_sequence are all stored; max
-- is the highest sequence stored. Gaps are computed from the events.
CREATE TABLE sentry_sources (
    source         TEXT    NOT NULL PRIMARY KEY,
    acked_sequence INTEGER NOT NULL DEFAULT 0,
    max_sequence   INTEGER NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE sentry_sources;
DROP TABLE sentry_events;
