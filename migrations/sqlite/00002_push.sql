-- Policy push: the gateway's signing keys, each sandbox's proxy CA, what
-- the gateways last recorded of each proxy, and the decision records
-- proxies ship.
--
-- Times are INTEGER nanoseconds since the Unix epoch, UTC, as in
-- 00001_initial.sql; times a caller may leave unset (zero) are NULL.

-- +goose Up

-- The signing keys form a chain in seq order; the newest signs.
CREATE TABLE signing_keys (
    id          TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
    seq         INTEGER NOT NULL UNIQUE CHECK (seq > 0),
    public_key  BLOB    NOT NULL CHECK (length(public_key) = 32),
    private_key BLOB    NOT NULL CHECK (length(private_key) = 64),
    endorsement BLOB    NOT NULL DEFAULT x'',
    created_at  INTEGER NOT NULL
) STRICT;

-- Keys are never changed or removed: a proxy may have pinned any of them.
-- +goose StatementBegin
CREATE TRIGGER signing_keys_no_update BEFORE UPDATE ON signing_keys
BEGIN
    SELECT RAISE(ABORT, 'signing keys are immutable');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER signing_keys_no_delete BEFORE DELETE ON signing_keys
BEGIN
    SELECT RAISE(ABORT, 'signing keys are immutable');
END;
-- +goose StatementEnd

CREATE TABLE sandbox_cas (
    sandbox    TEXT    NOT NULL PRIMARY KEY REFERENCES sandboxes (name) ON DELETE CASCADE,
    cert_pem   BLOB    NOT NULL CHECK (length(cert_pem) > 0),
    key_pem    BLOB    NOT NULL CHECK (length(key_pem) > 0),
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE proxies (
    sandbox           TEXT    NOT NULL REFERENCES sandboxes (name) ON DELETE CASCADE,
    proxy_id          TEXT    NOT NULL CHECK (proxy_id <> ''),
    replica           TEXT    NOT NULL DEFAULT '',
    build             TEXT    NOT NULL DEFAULT '',
    connected         INTEGER NOT NULL DEFAULT 0 CHECK (connected IN (0, 1)),
    connected_at      INTEGER,
    last_seen_at      INTEGER,
    applied_version   INTEGER NOT NULL DEFAULT 0,
    applied_hash      TEXT    NOT NULL DEFAULT '',
    last_ack_at       INTEGER,
    last_nack_version INTEGER NOT NULL DEFAULT 0,
    last_nack_error   TEXT    NOT NULL DEFAULT '',
    last_nack_at      INTEGER,
    lag_millis        INTEGER NOT NULL DEFAULT 0,
    decisions_dropped INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sandbox, proxy_id)
) STRICT;

-- Decision records outlive their sandbox: no foreign key. AUTOINCREMENT:
-- an id is never reused, so tailing by id stays correct if old records
-- are ever pruned.
CREATE TABLE decisions (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at    INTEGER NOT NULL,
    at             INTEGER,
    sandbox        TEXT    NOT NULL CHECK (sandbox <> ''),
    proxy_id       TEXT    NOT NULL CHECK (proxy_id <> ''),
    decision       TEXT    NOT NULL,
    binary_name    TEXT    NOT NULL DEFAULT '',
    host           TEXT    NOT NULL DEFAULT '',
    port           INTEGER NOT NULL DEFAULT 0 CHECK (port BETWEEN 0 AND 65535),
    addr           TEXT    NOT NULL DEFAULT '',
    http_method    TEXT    NOT NULL DEFAULT '',
    path           TEXT    NOT NULL DEFAULT '',
    mcp_method     TEXT    NOT NULL DEFAULT '',
    tool           TEXT    NOT NULL DEFAULT '',
    entry          TEXT    NOT NULL DEFAULT '',
    rule           TEXT    NOT NULL DEFAULT '',
    reason         TEXT    NOT NULL DEFAULT '',
    policy_version TEXT    NOT NULL DEFAULT '',
    denial_id      TEXT    NOT NULL DEFAULT '',
    version_probe  INTEGER NOT NULL DEFAULT 0 CHECK (version_probe IN (0, 1))
) STRICT;

CREATE INDEX decisions_sandbox_idx ON decisions (sandbox, id);
CREATE INDEX decisions_denial_id_idx ON decisions (denial_id) WHERE denial_id <> '';

-- +goose Down
DROP TABLE decisions;
DROP TABLE proxies;
DROP TABLE sandbox_cas;
DROP TABLE signing_keys;
