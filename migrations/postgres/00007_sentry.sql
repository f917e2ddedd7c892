-- Sentry events: watchdog reports, stored durably, idempotently and in
-- order per source (see store.SentryEvent). The schema is ours.

-- +goose Up

-- The idempotency key. sentry_events is partitioned by time, and a unique
-- index on a partitioned table must contain the partition key, so
-- (source, id) is kept unique here, in one small table that intake
-- inserts into first (ON CONFLICT DO NOTHING): only the keys it wins are
-- copied into sentry_events. Retention deletes keys with their events (so
-- an event older than the retention may be stored again).
CREATE TABLE sentry_event_keys (
    source      TEXT        NOT NULL,
    id          TEXT        NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    CONSTRAINT sentry_event_keys_pkey PRIMARY KEY (source, id)
);
-- No index on received_at: every event would pay for it, for a scan
-- that pruning (a few times a day) can afford.

-- The events, in daily partitions by when they were received: retention
-- drops whole partitions. sentry_ensure_partitions creates them ahead.
CREATE TABLE sentry_events (
    source      TEXT        NOT NULL,
    id          TEXT        NOT NULL,
    sequence    BIGINT      NOT NULL DEFAULT 0,
    type        TEXT        NOT NULL DEFAULT '',
    subject     TEXT        NOT NULL DEFAULT '',
    event_time  TIMESTAMPTZ NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    severity    TEXT        NOT NULL DEFAULT '',
    processing  TEXT        NOT NULL DEFAULT '',
    policy_hash TEXT        NOT NULL DEFAULT '',
    denial_id   TEXT        NOT NULL DEFAULT '',
    trace_id    TEXT        NOT NULL DEFAULT '',
    flags       JSONB       NOT NULL DEFAULT '[]',
    -- json, not jsonb: the document is kept verbatim.
    document    JSON        NOT NULL,
    CONSTRAINT sentry_events_sequence_check CHECK (sequence >= 0)
) PARTITION BY RANGE (received_at);
-- A source's stream (gaps; not a partial index: the gaps query compares
-- sequence with a parameter, which a partial index's predicate cannot
-- be proved from); a sandbox's events in time order; filters.
CREATE INDEX sentry_events_source_idx ON sentry_events (source, sequence);
CREATE INDEX sentry_events_subject_idx ON sentry_events (subject, event_time);
CREATE INDEX sentry_events_time_idx ON sentry_events (event_time);

-- Each source's ordering state: 1..acked_sequence are all stored; max
-- is the highest sequence stored. Gaps are computed from the events.
CREATE TABLE sentry_sources (
    source         TEXT   NOT NULL,
    acked_sequence BIGINT NOT NULL DEFAULT 0,
    max_sequence   BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT sentry_sources_pkey PRIMARY KEY (source)
);

-- sentry_ensure_partitions creates the daily partitions of the days
-- first .. first + days - 1 that do not exist. An advisory lock makes
-- replicas that run it together create each partition once.
-- +goose StatementBegin
CREATE FUNCTION sentry_ensure_partitions(first DATE, days INTEGER) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    d DATE;
    name TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('portcullis/sentry_partitions'));
    FOR i IN 0 .. days - 1 LOOP
        d := first + i;
        name := 'sentry_events_' || to_char(d, 'YYYYMMDD');
        IF to_regclass(name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF sentry_events FOR VALUES FROM (%L) TO (%L)',
                name, (d::timestamp AT TIME ZONE 'UTC'), ((d + 1)::timestamp AT TIME ZONE 'UTC'));
        END IF;
    END LOOP;
END $$;
-- +goose StatementEnd

-- sentry_move_staged is the second half of an append: the batch was
-- COPYed into this session's temporary sentry_staging (COPY has no ON
-- CONFLICT). It makes the partitions of days it has none for (and the
-- next day's, so a day's first batch seldom has to), then moves the events
-- whose key it wins in sentry_event_keys (the unique index a partitioned
-- table cannot have) into sentry_events, and returns their sources and
-- sequences. Ingest never NOTIFYs.
-- +goose StatementBegin
CREATE FUNCTION sentry_move_staged() RETURNS TABLE (event_source TEXT, event_sequence BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    d DATE;
BEGIN
    FOR d IN SELECT DISTINCT (s.received_at AT TIME ZONE 'UTC')::date FROM sentry_staging s LOOP
        IF to_regclass('sentry_events_' || to_char(d, 'YYYYMMDD')) IS NULL THEN
            PERFORM sentry_ensure_partitions(d, 2);
        END IF;
    END LOOP;
    RETURN QUERY WITH k AS (
        INSERT INTO sentry_event_keys (source, id, received_at)
        SELECT s.source, s.id, s.received_at FROM sentry_staging s ORDER BY s.source, s.id
        ON CONFLICT DO NOTHING RETURNING sentry_event_keys.source, sentry_event_keys.id)
    INSERT INTO sentry_events SELECT s.* FROM sentry_staging s JOIN k USING (source, id)
    RETURNING sentry_events.source, sentry_events.sequence;
END $$;
-- +goose StatementEnd

-- sentry_drop_partitions drops every partition whose days all lie before
-- cutoff (a UTC midnight), and the keys received before cutoff, and
-- returns how many events the partitions held.
-- +goose StatementBegin
CREATE FUNCTION sentry_drop_partitions(cutoff TIMESTAMPTZ) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    part TEXT;
    n BIGINT;
    total BIGINT := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('portcullis/sentry_partitions'));
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'sentry_events'::regclass
          AND c.relname < 'sentry_events_' || to_char(cutoff AT TIME ZONE 'UTC', 'YYYYMMDD')
        ORDER BY c.relname
    LOOP
        EXECUTE format('SELECT count(*) FROM %I', part) INTO n;
        EXECUTE format('DROP TABLE %I', part);
        total := total + n;
    END LOOP;
    DELETE FROM sentry_event_keys WHERE received_at < cutoff;
    RETURN total;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION sentry_drop_partitions(TIMESTAMPTZ);
DROP FUNCTION sentry_move_staged();
DROP FUNCTION sentry_ensure_partitions(DATE, INTEGER);
DROP TABLE sentry_sources;
DROP TABLE sentry_events;
DROP TABLE sentry_event_keys;
