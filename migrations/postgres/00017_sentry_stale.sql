-- A remediating Sentry event whose own time is older than the gateway's
-- --sentry-max-age (or too far ahead) is recorded, not acted on: its
-- action's status is stale (issue 37).

-- +goose Up
ALTER TABLE sentry_actions DROP CONSTRAINT sentry_actions_status_check,
    ADD CONSTRAINT sentry_actions_status_check CHECK (status IN
        ('frozen', 'held', 'dry_run', 'already_frozen', 'failed', 'dismissed', 'applied', 'stale'));

-- +goose Down
-- The older schema has no stale: such an action froze nothing, as a
-- failed one, and keeps its reason.
UPDATE sentry_actions SET status = 'failed' WHERE status = 'stale';
ALTER TABLE sentry_actions DROP CONSTRAINT sentry_actions_status_check,
    ADD CONSTRAINT sentry_actions_status_check CHECK (status IN
        ('frozen', 'held', 'dry_run', 'already_frozen', 'failed', 'dismissed', 'applied'));
