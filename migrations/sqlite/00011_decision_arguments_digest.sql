-- A denied tools/call's record carries the digest of its arguments (never
-- the arguments), so that arguments given later to propose exactly that
-- call can be checked against what was denied.

-- +goose Up
ALTER TABLE decisions ADD COLUMN arguments_digest TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE decisions DROP COLUMN arguments_digest;
