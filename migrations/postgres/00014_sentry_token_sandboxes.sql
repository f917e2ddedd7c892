-- A sentry token may be limited to the sandboxes its watchdog watches:
-- sandboxes holds its name globs (path.Match patterns), comma-separated;
-- empty means every sandbox (the tokens created before this migration).
-- Only a sentry token has any (tokens_sandboxes_check).

-- +goose Up
ALTER TABLE tokens ADD COLUMN sandboxes TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD CONSTRAINT tokens_sandboxes_check CHECK (role = 'sentry' OR sandboxes = '');

-- +goose Down
ALTER TABLE tokens DROP CONSTRAINT tokens_sandboxes_check;
ALTER TABLE tokens DROP COLUMN sandboxes;
