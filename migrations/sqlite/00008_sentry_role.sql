-- The sentry token role: a watchdog's credential, scoped to one event
-- source (the token's name). Like admin and operator it names no sandbox,
-- so the sandbox CHECK is unchanged.
--
-- SQLite cannot alter a CHECK constraint: the table is rebuilt (new table,
-- copy, drop, rename, indexes again). No foreign key or trigger refers to
-- tokens, so the rebuild needs no foreign_keys switch (which SQLite ignores
-- inside goose's transaction anyway). Ids are copied, so rowids and
-- last-use updates by id keep pointing at the same tokens.

-- +goose Up
CREATE TABLE tokens_new (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL UNIQUE,
    role         TEXT    NOT NULL CHECK (role IN ('admin', 'operator', 'sandbox', 'sentry')),
    sandbox      TEXT,
    hash         TEXT    NOT NULL UNIQUE,
    created_by   TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER,
    CHECK ((role = 'sandbox') = (sandbox IS NOT NULL))
) STRICT;
INSERT INTO tokens_new (id, name, role, sandbox, hash, created_by, created_at, last_used_at, revoked_at)
    SELECT id, name, role, sandbox, hash, created_by, created_at, last_used_at, revoked_at FROM tokens;
DROP TABLE tokens;
ALTER TABLE tokens_new RENAME TO tokens;
CREATE INDEX tokens_sandbox_live_idx ON tokens (sandbox) WHERE revoked_at IS NULL;

-- +goose Down
-- The older schema cannot hold a sentry token; dropping the rows revokes
-- them, the only safe direction for a credential the older code cannot check.
CREATE TABLE tokens_old (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL UNIQUE,
    role         TEXT    NOT NULL CHECK (role IN ('admin', 'operator', 'sandbox')),
    sandbox      TEXT,
    hash         TEXT    NOT NULL UNIQUE,
    created_by   TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER,
    CHECK ((role = 'sandbox') = (sandbox IS NOT NULL))
) STRICT;
INSERT INTO tokens_old (id, name, role, sandbox, hash, created_by, created_at, last_used_at, revoked_at)
    SELECT id, name, role, sandbox, hash, created_by, created_at, last_used_at, revoked_at FROM tokens
    WHERE role <> 'sentry';
DROP TABLE tokens;
ALTER TABLE tokens_old RENAME TO tokens;
CREATE INDEX tokens_sandbox_live_idx ON tokens (sandbox) WHERE revoked_at IS NULL;
