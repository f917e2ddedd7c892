-- Held calls: one in-flight request an allow rule with review.required
-- holds at its proxy until a person decides it (store.HeldCall), and the
-- approvals a quorum collects. A call goes with its sandbox. The
-- arguments are cleared a retention after the decision; the digest stays.

-- +goose Up
CREATE TABLE held_calls (
    id               BIGINT      GENERATED ALWAYS AS IDENTITY,
    sandbox          TEXT        NOT NULL,
    proxy_id         TEXT        NOT NULL,
    instance         TEXT        NOT NULL,
    call_key         TEXT        NOT NULL,
    binary_path      TEXT        NOT NULL,
    host             TEXT        NOT NULL,
    port             INTEGER     NOT NULL,
    method           TEXT        NOT NULL,
    path             TEXT        NOT NULL,
    mcp_method       TEXT        NOT NULL,
    tool             TEXT        NOT NULL,
    arguments_json   TEXT        NOT NULL,
    arguments_digest TEXT        NOT NULL,
    policy_version   BIGINT      NOT NULL,
    entry            TEXT        NOT NULL,
    rule             TEXT        NOT NULL,
    trace_id         TEXT        NOT NULL,
    status           TEXT        NOT NULL,
    requested_at     TIMESTAMPTZ NOT NULL,
    deadline         TIMESTAMPTZ NOT NULL,
    decided_at       TIMESTAMPTZ,
    decided_by       TEXT        NOT NULL DEFAULT '',
    reason           TEXT        NOT NULL DEFAULT '',
    proposal_id      BIGINT      NOT NULL DEFAULT 0,
    CONSTRAINT held_calls_pkey PRIMARY KEY (id),
    CONSTRAINT held_calls_key UNIQUE (sandbox, proxy_id, instance, call_key),
    CONSTRAINT held_calls_sandbox_fkey FOREIGN KEY (sandbox)
        REFERENCES sandboxes (name) ON DELETE CASCADE,
    CONSTRAINT held_calls_proxy_id_check CHECK (proxy_id <> ''),
    CONSTRAINT held_calls_instance_check CHECK (instance <> ''),
    CONSTRAINT held_calls_call_key_check CHECK (call_key <> ''),
    CONSTRAINT held_calls_port_check CHECK (port BETWEEN 1 AND 65535),
    CONSTRAINT held_calls_status_check CHECK (status IN ('held', 'approved', 'denied', 'expired', 'failed'))
);

-- Listing (by sandbox and status, newest first), the deadline sweep and
-- the arguments' retention.
CREATE INDEX held_calls_sandbox_idx ON held_calls (sandbox, status, requested_at);
CREATE INDEX held_calls_status_idx ON held_calls (status, requested_at);
CREATE INDEX held_calls_deadline_idx ON held_calls (deadline) WHERE status = 'held';
CREATE INDEX held_calls_decided_idx ON held_calls (decided_at) WHERE arguments_json <> '';

CREATE TABLE held_call_approvals (
    call_id    BIGINT      NOT NULL,
    approver   TEXT        NOT NULL,
    reason     TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    CONSTRAINT held_call_approvals_pkey PRIMARY KEY (call_id, approver),
    CONSTRAINT held_call_approvals_call_id_fkey FOREIGN KEY (call_id)
        REFERENCES held_calls (id) ON DELETE CASCADE,
    CONSTRAINT held_call_approvals_approver_check CHECK (approver <> '')
);

-- +goose Down
DROP TABLE held_call_approvals;
DROP TABLE held_calls;
