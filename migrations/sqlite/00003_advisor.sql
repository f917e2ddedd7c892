-- Policy advisor: each sandbox's boundary and credentialed hosts, and the
-- proposals sandboxes submit.
--
-- Times are INTEGER nanoseconds since the Unix epoch, UTC, as in
-- 00001_initial.sql. Lists (credentialed hosts, supersede keys) are JSON
-- arrays of strings in TEXT: SQLite has no array type, and json_each reads
-- them in queries. Policy documents and findings are BLOBs, so their bytes
-- come back unchanged.

-- +goose Up

-- boundary is NULL when the sandbox has none. credentialed_hosts is kept
-- sorted by the store.
ALTER TABLE sandboxes ADD COLUMN boundary BLOB;
ALTER TABLE sandboxes ADD COLUMN boundary_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN credentialed_hosts TEXT NOT NULL DEFAULT '[]'
    CHECK (json_valid(credentialed_hosts) AND json_type(credentialed_hosts) = 'array');

-- AUTOINCREMENT: an id is never reused, so audit entries naming a proposal
-- of a deleted sandbox never come to name another. idempotency_key and
-- dedupe_key are '' for none; superseded_by is 0 for none.
CREATE TABLE proposals (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox         TEXT    NOT NULL REFERENCES sandboxes (name) ON DELETE CASCADE,
    status          TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN
        ('pending', 'approved', 'applied', 'rejected', 'expired', 'superseded', 'withdrawn')),
    status_reason   TEXT    NOT NULL DEFAULT '',
    rationale       TEXT    NOT NULL DEFAULT '',
    proposer        TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT    NOT NULL DEFAULT '',
    denial_id       TEXT    NOT NULL DEFAULT '',
    document        BLOB    NOT NULL CHECK (length(document) > 0),
    dedupe_key      TEXT    NOT NULL DEFAULT '',
    supersede_keys  TEXT    NOT NULL DEFAULT '[]'
        CHECK (json_valid(supersede_keys) AND json_type(supersede_keys) = 'array'),
    base_version    INTEGER NOT NULL DEFAULT 0 CHECK (base_version >= 0),
    base_hash       TEXT    NOT NULL DEFAULT '',
    resulting       BLOB    NOT NULL DEFAULT x'',
    resulting_hash  TEXT    NOT NULL DEFAULT '',
    findings        BLOB    NOT NULL DEFAULT x'',
    rebase_error    TEXT    NOT NULL DEFAULT '',
    superseded_by   INTEGER NOT NULL DEFAULT 0 CHECK (superseded_by >= 0),
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;

-- A retried submission finds its proposal by key; the index also makes a
-- second one with the same key fail rather than be stored.
CREATE UNIQUE INDEX proposals_idempotency_key_idx ON proposals (sandbox, idempotency_key)
    WHERE idempotency_key <> '';
-- Pending proposals of a sandbox (dedupe, supersede) and listing by status.
CREATE INDEX proposals_sandbox_status_idx ON proposals (sandbox, status, id);
-- A sandbox's proposals newest first; the rate limit counts them.
CREATE INDEX proposals_sandbox_idx ON proposals (sandbox, id);
-- Every proposal with a status (e.g. all pending), newest first.
CREATE INDEX proposals_status_idx ON proposals (status, id);

-- +goose Down
DROP TABLE proposals;
ALTER TABLE sandboxes DROP COLUMN credentialed_hosts;
ALTER TABLE sandboxes DROP COLUMN boundary_hash;
ALTER TABLE sandboxes DROP COLUMN boundary;
