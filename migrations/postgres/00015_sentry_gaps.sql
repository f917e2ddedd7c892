-- A source's gaps are kept, not computed: each append splits or adds the
-- ranges its sequences touch, so its cost does not grow with the events
-- stored above a hole that never closes (issue 34). gap_count is how many
-- ranges a source has, so that an answer lists the first few and counts
-- the rest without reading them. The gaps of the events stored before
-- this migration are computed once, here.

-- +goose Up
CREATE TABLE sentry_gaps (
    source TEXT   NOT NULL,
    lo     BIGINT NOT NULL,
    hi     BIGINT NOT NULL,
    CONSTRAINT sentry_gaps_pkey PRIMARY KEY (source, lo),
    CONSTRAINT sentry_gaps_range_check CHECK (lo >= 1 AND lo <= hi)
);
ALTER TABLE sentry_sources ADD COLUMN gap_count BIGINT NOT NULL DEFAULT 0;
INSERT INTO sentry_gaps (source, lo, hi)
SELECT source, lo, hi FROM (
    SELECT s.source, s.sequence + 1 AS lo,
        lead(s.sequence, 1, m.max_sequence + 1) OVER (PARTITION BY s.source ORDER BY s.sequence) - 1 AS hi
    FROM (SELECT source, acked_sequence AS sequence FROM sentry_sources
        UNION SELECT e.source, e.sequence FROM sentry_events e
            JOIN sentry_sources a ON a.source = e.source AND e.sequence > a.acked_sequence) s
    JOIN sentry_sources m ON m.source = s.source
) g WHERE lo <= hi;
UPDATE sentry_sources SET gap_count = (SELECT count(*) FROM sentry_gaps g WHERE g.source = sentry_sources.source);

-- +goose Down
ALTER TABLE sentry_sources DROP COLUMN gap_count;
DROP TABLE sentry_gaps;
