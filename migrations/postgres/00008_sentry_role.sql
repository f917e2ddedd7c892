-- The sentry token role: a watchdog's credential, scoped to one event
-- source (the token's name). Like admin and operator it names no sandbox,
-- so tokens_sandbox_check is unchanged.

-- +goose Up
ALTER TABLE tokens DROP CONSTRAINT tokens_role_check;
ALTER TABLE tokens ADD CONSTRAINT tokens_role_check
    CHECK (role IN ('admin', 'operator', 'sandbox', 'sentry'));

-- +goose Down
-- The older schema cannot hold a sentry token; removing the rows revokes
-- them, the only safe direction for a credential the older code cannot check.
DELETE FROM tokens WHERE role = 'sentry';
ALTER TABLE tokens DROP CONSTRAINT tokens_role_check;
ALTER TABLE tokens ADD CONSTRAINT tokens_role_check
    CHECK (role IN ('admin', 'operator', 'sandbox'));
