-- Initial Portcullis schema for SQLite.
--
-- Times are INTEGER nanoseconds since the Unix epoch, UTC: they sort and
-- compare as numbers and never depend on a text format. Ids are INTEGER
-- PRIMARY KEY (the rowid): SQLite silently accepts BIGSERIAL and yields NULL.
-- STRICT tables make SQLite check the declared types.

-- +goose Up
CREATE TABLE sandboxes (
    name            TEXT    NOT NULL PRIMARY KEY CHECK (name <> ''),
    current_version INTEGER NOT NULL DEFAULT 0 CHECK (current_version >= 0),
    current_hash    TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    created_by      TEXT    NOT NULL
) STRICT;

CREATE TABLE policy_versions (
    sandbox    TEXT    NOT NULL REFERENCES sandboxes (name) ON DELETE CASCADE,
    version    INTEGER NOT NULL CHECK (version > 0),
    hash       TEXT    NOT NULL,
    document   TEXT    NOT NULL,
    author     TEXT    NOT NULL,
    source     TEXT    NOT NULL,
    provenance TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(provenance)),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (sandbox, version)
) STRICT;

-- Tokens outlive their sandbox (DeleteSandbox revokes them), so tokens.sandbox
-- has no foreign key.
CREATE TABLE tokens (
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

CREATE INDEX tokens_sandbox_live_idx ON tokens (sandbox) WHERE revoked_at IS NULL;

-- audit_log keeps history after a sandbox is deleted: no foreign keys.
CREATE TABLE audit_log (
    id          INTEGER PRIMARY KEY,
    at          INTEGER NOT NULL,
    actor       TEXT    NOT NULL,
    action      TEXT    NOT NULL,
    sandbox     TEXT    NOT NULL DEFAULT '',
    target      TEXT    NOT NULL DEFAULT '',
    before_hash TEXT    NOT NULL DEFAULT '',
    after_hash  TEXT    NOT NULL DEFAULT '',
    detail      TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(detail))
) STRICT;

CREATE INDEX audit_log_sandbox_idx ON audit_log (sandbox, id);

-- The audit log is append-only and policy versions are immutable.
-- +goose StatementBegin
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER policy_versions_immutable BEFORE UPDATE ON policy_versions
BEGIN
    SELECT RAISE(ABORT, 'policy versions are immutable');
END;
-- +goose StatementEnd

-- +goose Down
DROP TABLE audit_log;
DROP TABLE tokens;
DROP TABLE policy_versions;
DROP TABLE sandboxes;
