-- Approval workflow: approvals of proposals, what applying one recorded,
-- the versioned Rego approval rules, and the kill switch (frozen
-- sandboxes). Independent of 00004 (audit chain).

-- +goose Up

-- expires_at: when a pending proposal expires (NULL: never). decided_at and
-- decided_by: when and by whom it left pending. applied_version: the policy
-- version an applied proposal became (0: none); grant_expires_at: the end
-- of its grant (NULL: none).
ALTER TABLE proposals
    ADD COLUMN expires_at       TIMESTAMPTZ,
    ADD COLUMN decided_at       TIMESTAMPTZ,
    ADD COLUMN decided_by       TEXT   NOT NULL DEFAULT '',
    ADD COLUMN applied_version  BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN grant_expires_at TIMESTAMPTZ,
    ADD CONSTRAINT proposals_applied_version_check CHECK (applied_version >= 0);

-- Pending proposals by expiry (ExpireProposals).
CREATE INDEX proposals_pending_expires_idx ON proposals (expires_at) WHERE status = 'pending';

-- frozen: the kill switch holds the sandbox at a deny-all version;
-- frozen_from is the version current before it (0 when not frozen).
ALTER TABLE sandboxes
    ADD COLUMN frozen        BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN frozen_reason TEXT    NOT NULL DEFAULT '',
    ADD COLUMN frozen_by     TEXT    NOT NULL DEFAULT '',
    ADD COLUMN frozen_at     TIMESTAMPTZ,
    ADD COLUMN frozen_from   BIGINT  NOT NULL DEFAULT 0,
    ADD CONSTRAINT sandboxes_frozen_from_check CHECK (frozen_from >= 0);

-- One approval per approver of a proposal; the id orders them (oldest
-- first). resulting_hash is the resulting policy the approver confirmed.
-- The unique constraint's index also finds a proposal's approvals (and
-- serves the cascade).
CREATE TABLE proposal_approvals (
    id             BIGINT      GENERATED ALWAYS AS IDENTITY,
    proposal_id    BIGINT      NOT NULL,
    approver       TEXT        NOT NULL,
    reason         TEXT        NOT NULL DEFAULT '',
    resulting_hash TEXT        NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT proposal_approvals_pkey PRIMARY KEY (id),
    CONSTRAINT proposal_approvals_proposal_id_fkey FOREIGN KEY (proposal_id)
        REFERENCES proposals (id) ON DELETE CASCADE,
    CONSTRAINT proposal_approvals_approver_key UNIQUE (proposal_id, approver),
    CONSTRAINT proposal_approvals_approver_check CHECK (approver <> '')
);

-- The approval rules (a Rego module), append-only like policy versions:
-- the newest version applies.
CREATE TABLE approval_policies (
    version    BIGINT      NOT NULL,
    module     TEXT        NOT NULL,
    hash       TEXT        NOT NULL,
    author     TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT approval_policies_pkey PRIMARY KEY (version),
    CONSTRAINT approval_policies_version_check CHECK (version > 0)
);

CREATE TRIGGER approval_policies_immutable
    BEFORE UPDATE OR DELETE ON approval_policies
    FOR EACH ROW EXECUTE FUNCTION portcullis_refuse_change();

-- +goose Down
DROP TABLE approval_policies;
DROP TABLE proposal_approvals;
ALTER TABLE sandboxes
    DROP CONSTRAINT sandboxes_frozen_from_check,
    DROP COLUMN frozen_from,
    DROP COLUMN frozen_at,
    DROP COLUMN frozen_by,
    DROP COLUMN frozen_reason,
    DROP COLUMN frozen;
DROP INDEX proposals_pending_expires_idx;
ALTER TABLE proposals
    DROP CONSTRAINT proposals_applied_version_check,
    DROP COLUMN grant_expires_at,
    DROP COLUMN applied_version,
    DROP COLUMN decided_by,
    DROP COLUMN decided_at,
    DROP COLUMN expires_at;
