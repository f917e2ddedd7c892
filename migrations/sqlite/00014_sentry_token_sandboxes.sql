-- A sentry token may be limited to the sandboxes its watchdog watches:
-- sandboxes holds its name globs (path.Match patterns), comma-separated;
-- empty means every sandbox (the tokens created before this migration).
-- Only a sentry token has any (the CHECK).

-- +goose Up
ALTER TABLE tokens ADD COLUMN sandboxes TEXT NOT NULL DEFAULT '' CHECK (role = 'sentry' OR sandboxes = '');

-- +goose Down
ALTER TABLE tokens DROP COLUMN sandboxes;
