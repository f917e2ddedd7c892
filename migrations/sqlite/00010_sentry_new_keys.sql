-- Postgres's 00010 changes how its intake writes Sentry events (one COPY
-- of the new events, after claiming their keys). SQLite's intake inserts
-- row by row with ON CONFLICT and has nothing to change; this keeps the
-- two engines' schema versions in step.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
