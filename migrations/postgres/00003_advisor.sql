-- Policy advisor: each sandbox's boundary and credentialed hosts, and the
-- proposals sandboxes submit.
--
-- Policy documents and findings are BYTEA, not JSONB, so their bytes come
-- back unchanged (a document's SHA-256 is its hash). Lists are TEXT[].

-- +goose Up

-- boundary is NULL when the sandbox has none. credentialed_hosts is kept
-- sorted by the store.
ALTER TABLE sandboxes
    ADD COLUMN boundary           BYTEA,
    ADD COLUMN boundary_hash      TEXT   NOT NULL DEFAULT '',
    ADD COLUMN credentialed_hosts TEXT[] NOT NULL DEFAULT '{}';

-- idempotency_key and dedupe_key are '' for none; superseded_by is 0 for
-- none. Identity ids are never reused.
CREATE TABLE proposals (
    id              BIGINT      GENERATED ALWAYS AS IDENTITY,
    sandbox         TEXT        NOT NULL,
    status          TEXT        NOT NULL DEFAULT 'pending',
    status_reason   TEXT        NOT NULL DEFAULT '',
    rationale       TEXT        NOT NULL DEFAULT '',
    proposer        TEXT        NOT NULL DEFAULT '',
    idempotency_key TEXT        NOT NULL DEFAULT '',
    denial_id       TEXT        NOT NULL DEFAULT '',
    document        BYTEA       NOT NULL,
    dedupe_key      TEXT        NOT NULL DEFAULT '',
    supersede_keys  TEXT[]      NOT NULL DEFAULT '{}',
    base_version    BIGINT      NOT NULL DEFAULT 0,
    base_hash       TEXT        NOT NULL DEFAULT '',
    resulting       BYTEA       NOT NULL DEFAULT '\x',
    resulting_hash  TEXT        NOT NULL DEFAULT '',
    findings        BYTEA       NOT NULL DEFAULT '\x',
    rebase_error    TEXT        NOT NULL DEFAULT '',
    superseded_by   BIGINT      NOT NULL DEFAULT 0,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT proposals_pkey PRIMARY KEY (id),
    CONSTRAINT proposals_sandbox_fkey FOREIGN KEY (sandbox)
        REFERENCES sandboxes (name) ON DELETE CASCADE,
    CONSTRAINT proposals_status_check CHECK (status IN
        ('pending', 'approved', 'applied', 'rejected', 'expired', 'superseded', 'withdrawn')),
    CONSTRAINT proposals_document_check CHECK (length(document) > 0),
    CONSTRAINT proposals_base_version_check CHECK (base_version >= 0),
    CONSTRAINT proposals_superseded_by_check CHECK (superseded_by >= 0)
);

-- A retried submission finds its proposal by key; the index also makes a
-- second one with the same key fail rather than be stored.
CREATE UNIQUE INDEX proposals_idempotency_key_idx ON proposals (sandbox, idempotency_key)
    WHERE idempotency_key <> '';
-- Pending proposals of a sandbox (dedupe, supersede) and listing by status.
CREATE INDEX proposals_sandbox_status_idx ON proposals (sandbox, status, id);
-- A sandbox's proposals newest first; the rate limit counts them, and the
-- cascade from sandboxes finds them.
CREATE INDEX proposals_sandbox_idx ON proposals (sandbox, id);
-- Every proposal with a status (e.g. all pending), newest first.
CREATE INDEX proposals_status_idx ON proposals (status, id);

-- +goose Down
DROP TABLE proposals;
ALTER TABLE sandboxes
    DROP COLUMN credentialed_hosts,
    DROP COLUMN boundary_hash,
    DROP COLUMN boundary;
