-- A record may summarise a flood of similar decisions (summary_count of
-- them, the first at "at", the last at summary_last_at, with the first
-- and last denial ids), and a record's long fields may have been cut:
-- cuts holds, as JSON, each cut field's original length and SHA-256.

-- +goose Up
ALTER TABLE decisions ADD COLUMN summary_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE decisions ADD COLUMN summary_last_at INTEGER;
ALTER TABLE decisions ADD COLUMN summary_first_denial_id TEXT NOT NULL DEFAULT '';
ALTER TABLE decisions ADD COLUMN summary_last_denial_id TEXT NOT NULL DEFAULT '';
ALTER TABLE decisions ADD COLUMN cuts TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE decisions DROP COLUMN cuts;
ALTER TABLE decisions DROP COLUMN summary_last_denial_id;
ALTER TABLE decisions DROP COLUMN summary_first_denial_id;
ALTER TABLE decisions DROP COLUMN summary_last_at;
ALTER TABLE decisions DROP COLUMN summary_count;
