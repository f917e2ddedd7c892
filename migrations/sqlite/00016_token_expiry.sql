-- A token may expire: expires_at (Unix nanoseconds, as created_at) is the
-- instant from which the gateway refuses it as expired; NULL never expires
-- (every token created before this migration).

-- +goose Up
ALTER TABLE tokens ADD COLUMN expires_at INTEGER;

-- +goose Down
ALTER TABLE tokens DROP COLUMN expires_at;
