-- Held calls: one in-flight request an allow rule with review.required
-- holds at its proxy until a person decides it (store.HeldCall), and the
-- approvals a quorum collects. A call goes with its sandbox. The
-- arguments are cleared a retention after the decision; the digest stays.
--
-- Times are INTEGER nanoseconds since the Unix epoch, UTC.

-- +goose Up
CREATE TABLE held_calls (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox          TEXT    NOT NULL REFERENCES sandboxes (name) ON DELETE CASCADE,
    proxy_id         TEXT    NOT NULL CHECK (proxy_id <> ''),
    instance         TEXT    NOT NULL CHECK (instance <> ''),
    call_key         TEXT    NOT NULL CHECK (call_key <> ''),
    binary_path      TEXT    NOT NULL,
    host             TEXT    NOT NULL,
    port             INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    method           TEXT    NOT NULL,
    path             TEXT    NOT NULL,
    mcp_method       TEXT    NOT NULL,
    tool             TEXT    NOT NULL,
    arguments_json   TEXT    NOT NULL,
    arguments_digest TEXT    NOT NULL,
    policy_version   INTEGER NOT NULL,
    entry            TEXT    NOT NULL,
    rule             TEXT    NOT NULL,
    trace_id         TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('held', 'approved', 'denied', 'expired', 'failed')),
    requested_at     INTEGER NOT NULL,
    deadline         INTEGER NOT NULL,
    decided_at       INTEGER,
    decided_by       TEXT    NOT NULL DEFAULT '',
    reason           TEXT    NOT NULL DEFAULT '',
    proposal_id      INTEGER NOT NULL DEFAULT 0,
    UNIQUE (sandbox, proxy_id, instance, call_key)
) STRICT;

-- Listing (by sandbox and status, newest first), the deadline sweep and
-- the arguments' retention.
CREATE INDEX held_calls_sandbox_idx ON held_calls (sandbox, status, requested_at);
CREATE INDEX held_calls_status_idx ON held_calls (status, requested_at);
CREATE INDEX held_calls_deadline_idx ON held_calls (deadline) WHERE status = 'held';
CREATE INDEX held_calls_decided_idx ON held_calls (decided_at) WHERE arguments_json <> '';

CREATE TABLE held_call_approvals (
    call_id    INTEGER NOT NULL REFERENCES held_calls (id) ON DELETE CASCADE,
    approver   TEXT    NOT NULL CHECK (approver <> ''),
    reason     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (call_id, approver)
) STRICT;

-- +goose Down
DROP TABLE held_call_approvals;
DROP TABLE held_calls;
