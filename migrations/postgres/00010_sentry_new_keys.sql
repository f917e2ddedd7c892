-- Sentry intake writes each event once. An append used to COPY the whole
-- batch into a temporary staging table and move the new events on with
-- INSERT … ON CONFLICT DO NOTHING (sentry_move_staged): every stored
-- event was written twice and read once more, and the speculative inserts
-- of ON CONFLICT were the costliest step. Now an append, which holds its
-- sources' rows locked, asks which keys are new (sentry_new_keys) and
-- COPYs those keys and their events straight into sentry_event_keys and
-- sentry_events (BENCHMARKS.md, "Sentry: gateway intake").

-- +goose Up

-- sentry_new_keys makes the partitions of the days the batch was received
-- on if they are missing (and the next day's), and returns the positions
-- (from 0, in order) of the batch's keys (its events' sources, ids and
-- receive times, one array each, no key twice) that sentry_event_keys
-- does not hold: the events the caller must store.
-- +goose StatementBegin
CREATE FUNCTION sentry_new_keys(sources TEXT[], ids TEXT[], received TIMESTAMPTZ[]) RETURNS SETOF INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    d DATE;
BEGIN
    FOR d IN SELECT DISTINCT (r AT TIME ZONE 'UTC')::date FROM unnest(received) r LOOP
        IF to_regclass('sentry_events_' || to_char(d, 'YYYYMMDD')) IS NULL THEN
            PERFORM sentry_ensure_partitions(d, 2);
        END IF;
    END LOOP;
    RETURN QUERY SELECT (u.n - 1)::INTEGER FROM unnest(sources, ids) WITH ORDINALITY AS u(s, i, n)
        WHERE NOT EXISTS (SELECT 1 FROM sentry_event_keys k WHERE k.source = u.s AND k.id = u.i)
        ORDER BY u.n;
END $$;
-- +goose StatementEnd

DROP FUNCTION sentry_move_staged();

-- +goose Down
DROP FUNCTION sentry_new_keys(TEXT[], TEXT[], TIMESTAMPTZ[]);

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
