-- Approval workflow: approvals of proposals, what applying one recorded,
-- the versioned Rego approval rules, and the kill switch (frozen
-- sandboxes).
--
-- Times are INTEGER nanoseconds since the Unix epoch, UTC, NULL for none,
-- as in 00001_initial.sql. Independent of 00004 (audit chain).

-- +goose Up

-- expires_at: when a pending proposal expires (NULL: never). decided_at and
-- decided_by: when and by whom it left pending. applied_version: the policy
-- version an applied proposal became (0: none); grant_expires_at: the end
-- of its grant (NULL: none).
ALTER TABLE proposals ADD COLUMN expires_at INTEGER;
ALTER TABLE proposals ADD COLUMN decided_at INTEGER;
ALTER TABLE proposals ADD COLUMN decided_by TEXT NOT NULL DEFAULT '';
ALTER TABLE proposals ADD COLUMN applied_version INTEGER NOT NULL DEFAULT 0 CHECK (applied_version >= 0);
ALTER TABLE proposals ADD COLUMN grant_expires_at INTEGER;

-- Pending proposals by expiry (ExpireProposals).
CREATE INDEX proposals_pending_expires_idx ON proposals (expires_at) WHERE status = 'pending';

-- frozen: the kill switch holds the sandbox at a deny-all version;
-- frozen_from is the version current before it (0 when not frozen).
ALTER TABLE sandboxes ADD COLUMN frozen INTEGER NOT NULL DEFAULT 0 CHECK (frozen IN (0, 1));
ALTER TABLE sandboxes ADD COLUMN frozen_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN frozen_by TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN frozen_at INTEGER;
ALTER TABLE sandboxes ADD COLUMN frozen_from INTEGER NOT NULL DEFAULT 0 CHECK (frozen_from >= 0);

-- One approval per approver of a proposal; the id orders them (oldest
-- first). resulting_hash is the resulting policy the approver confirmed.
-- The unique index also finds a proposal's approvals (and the cascade).
CREATE TABLE proposal_approvals (
    id             INTEGER PRIMARY KEY,
    proposal_id    INTEGER NOT NULL REFERENCES proposals (id) ON DELETE CASCADE,
    approver       TEXT    NOT NULL CHECK (approver <> ''),
    reason         TEXT    NOT NULL DEFAULT '',
    resulting_hash TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    UNIQUE (proposal_id, approver)
) STRICT;

-- The approval rules (a Rego module), append-only like policy versions:
-- the newest version applies.
CREATE TABLE approval_policies (
    version    INTEGER PRIMARY KEY CHECK (version > 0),
    module     TEXT    NOT NULL,
    hash       TEXT    NOT NULL,
    author     TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- +goose StatementBegin
CREATE TRIGGER approval_policies_immutable BEFORE UPDATE ON approval_policies
BEGIN
    SELECT RAISE(ABORT, 'approval policies are immutable');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER approval_policies_no_delete BEFORE DELETE ON approval_policies
BEGIN
    SELECT RAISE(ABORT, 'approval policies are append-only');
END;
-- +goose StatementEnd

-- +goose Down
DROP TABLE approval_policies;
DROP TABLE proposal_approvals;
ALTER TABLE sandboxes DROP COLUMN frozen_from;
ALTER TABLE sandboxes DROP COLUMN frozen_at;
ALTER TABLE sandboxes DROP COLUMN frozen_by;
ALTER TABLE sandboxes DROP COLUMN frozen_reason;
ALTER TABLE sandboxes DROP COLUMN frozen;
DROP INDEX proposals_pending_expires_idx;
ALTER TABLE proposals DROP COLUMN grant_expires_at;
ALTER TABLE proposals DROP COLUMN applied_version;
ALTER TABLE proposals DROP COLUMN decided_by;
ALTER TABLE proposals DROP COLUMN decided_at;
ALTER TABLE proposals DROP COLUMN expires_at;
