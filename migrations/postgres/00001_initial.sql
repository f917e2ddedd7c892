-- Initial Portcullis schema for PostgreSQL.
--
-- policy_versions.document is TEXT, not JSONB: JSONB re-orders keys and
-- normalises whitespace, and the stored canonical bytes must come back
-- byte-identical (their SHA-256 is the version's hash, which proxies verify).

-- +goose Up
CREATE TABLE sandboxes (
    name            TEXT        NOT NULL,
    current_version BIGINT      NOT NULL DEFAULT 0,
    current_hash    TEXT        NOT NULL DEFAULT '',
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_by      TEXT        NOT NULL,
    CONSTRAINT sandboxes_pkey PRIMARY KEY (name),
    CONSTRAINT sandboxes_name_check CHECK (name <> ''),
    CONSTRAINT sandboxes_current_version_check CHECK (current_version >= 0)
);

CREATE TABLE policy_versions (
    sandbox    TEXT        NOT NULL,
    version    BIGINT      NOT NULL,
    hash       TEXT        NOT NULL,
    document   TEXT        NOT NULL,
    author     TEXT        NOT NULL,
    source     TEXT        NOT NULL,
    provenance JSONB       NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT policy_versions_pkey PRIMARY KEY (sandbox, version),
    CONSTRAINT policy_versions_sandbox_fkey FOREIGN KEY (sandbox)
        REFERENCES sandboxes (name) ON DELETE CASCADE,
    CONSTRAINT policy_versions_version_check CHECK (version > 0)
);

-- Tokens outlive their sandbox (DeleteSandbox revokes them), so tokens.sandbox
-- has no foreign key.
CREATE TABLE tokens (
    id           BIGINT      GENERATED ALWAYS AS IDENTITY,
    name         TEXT        NOT NULL,
    role         TEXT        NOT NULL,
    sandbox      TEXT,
    hash         TEXT        NOT NULL,
    created_by   TEXT        NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ,
    CONSTRAINT tokens_pkey PRIMARY KEY (id),
    CONSTRAINT tokens_name_key UNIQUE (name),
    CONSTRAINT tokens_hash_key UNIQUE (hash),
    CONSTRAINT tokens_role_check CHECK (role IN ('admin', 'operator', 'sandbox')),
    CONSTRAINT tokens_sandbox_check CHECK ((role = 'sandbox') = (sandbox IS NOT NULL))
);

CREATE INDEX tokens_sandbox_live_idx ON tokens (sandbox) WHERE revoked_at IS NULL;

-- audit_log keeps history after a sandbox is deleted: no foreign keys.
CREATE TABLE audit_log (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY,
    at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor       TEXT        NOT NULL,
    action      TEXT        NOT NULL,
    sandbox     TEXT        NOT NULL DEFAULT '',
    target      TEXT        NOT NULL DEFAULT '',
    before_hash TEXT        NOT NULL DEFAULT '',
    after_hash  TEXT        NOT NULL DEFAULT '',
    detail      JSONB       NOT NULL DEFAULT '{}',
    CONSTRAINT audit_log_pkey PRIMARY KEY (id)
);

CREATE INDEX audit_log_sandbox_idx ON audit_log (sandbox, id);

-- The audit log is append-only and policy versions are immutable; the
-- database refuses anything else, whoever connects.
-- +goose StatementBegin
CREATE FUNCTION portcullis_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% on % is not allowed: rows are immutable', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION portcullis_refuse_change();

CREATE TRIGGER audit_log_no_truncate
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION portcullis_refuse_change();

CREATE TRIGGER policy_versions_immutable
    BEFORE UPDATE ON policy_versions
    FOR EACH ROW EXECUTE FUNCTION portcullis_refuse_change();

-- +goose Down
DROP TABLE audit_log;
DROP TABLE tokens;
DROP TABLE policy_versions;
DROP TABLE sandboxes;
DROP FUNCTION portcullis_refuse_change();
