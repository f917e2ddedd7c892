-- Policy push: the gateway's signing keys, each sandbox's proxy CA, what
-- the gateways last recorded of each proxy, and the decision records
-- proxies ship.
--
-- Binary material (keys, PEM) is BYTEA so its bytes come back unchanged.
-- Times a caller may leave unset (zero) are NULL.

-- +goose Up

-- The signing keys form a chain in seq order; the newest signs. The unique
-- seq is what makes two replicas appending at once lose one of them.
CREATE TABLE signing_keys (
    id          TEXT        NOT NULL,
    seq         BIGINT      NOT NULL,
    public_key  BYTEA       NOT NULL,
    private_key BYTEA       NOT NULL,
    endorsement BYTEA       NOT NULL DEFAULT '\x',
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT signing_keys_pkey PRIMARY KEY (id),
    CONSTRAINT signing_keys_seq_key UNIQUE (seq),
    CONSTRAINT signing_keys_id_check CHECK (id <> ''),
    CONSTRAINT signing_keys_seq_check CHECK (seq > 0),
    CONSTRAINT signing_keys_public_key_check CHECK (length(public_key) = 32),
    CONSTRAINT signing_keys_private_key_check CHECK (length(private_key) = 64)
);

-- Keys are never changed or removed: a proxy may have pinned any of them.
CREATE TRIGGER signing_keys_immutable
    BEFORE UPDATE OR DELETE ON signing_keys
    FOR EACH ROW EXECUTE FUNCTION portcullis_refuse_change();

CREATE TABLE sandbox_cas (
    sandbox    TEXT        NOT NULL,
    cert_pem   BYTEA       NOT NULL,
    key_pem    BYTEA       NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT sandbox_cas_pkey PRIMARY KEY (sandbox),
    CONSTRAINT sandbox_cas_sandbox_fkey FOREIGN KEY (sandbox)
        REFERENCES sandboxes (name) ON DELETE CASCADE,
    CONSTRAINT sandbox_cas_cert_pem_check CHECK (length(cert_pem) > 0),
    CONSTRAINT sandbox_cas_key_pem_check CHECK (length(key_pem) > 0)
);

CREATE TABLE proxies (
    sandbox           TEXT        NOT NULL,
    proxy_id          TEXT        NOT NULL,
    replica           TEXT        NOT NULL DEFAULT '',
    build             TEXT        NOT NULL DEFAULT '',
    connected         BOOLEAN     NOT NULL DEFAULT false,
    connected_at      TIMESTAMPTZ,
    last_seen_at      TIMESTAMPTZ,
    applied_version   BIGINT      NOT NULL DEFAULT 0,
    applied_hash      TEXT        NOT NULL DEFAULT '',
    last_ack_at       TIMESTAMPTZ,
    last_nack_version BIGINT      NOT NULL DEFAULT 0,
    last_nack_error   TEXT        NOT NULL DEFAULT '',
    last_nack_at      TIMESTAMPTZ,
    lag_millis        BIGINT      NOT NULL DEFAULT 0,
    decisions_dropped BIGINT      NOT NULL DEFAULT 0,
    CONSTRAINT proxies_pkey PRIMARY KEY (sandbox, proxy_id),
    CONSTRAINT proxies_sandbox_fkey FOREIGN KEY (sandbox)
        REFERENCES sandboxes (name) ON DELETE CASCADE,
    CONSTRAINT proxies_proxy_id_check CHECK (proxy_id <> '')
);

-- Decision records outlive their sandbox: no foreign key. Ids are assigned
-- in commit order (appends are serialised), so tailing by id misses none.
CREATE TABLE decisions (
    id             BIGINT      GENERATED ALWAYS AS IDENTITY,
    received_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    at             TIMESTAMPTZ,
    sandbox        TEXT        NOT NULL,
    proxy_id       TEXT        NOT NULL,
    decision       TEXT        NOT NULL,
    binary_name    TEXT        NOT NULL DEFAULT '',
    host           TEXT        NOT NULL DEFAULT '',
    port           INTEGER     NOT NULL DEFAULT 0,
    addr           TEXT        NOT NULL DEFAULT '',
    http_method    TEXT        NOT NULL DEFAULT '',
    path           TEXT        NOT NULL DEFAULT '',
    mcp_method     TEXT        NOT NULL DEFAULT '',
    tool           TEXT        NOT NULL DEFAULT '',
    entry          TEXT        NOT NULL DEFAULT '',
    rule           TEXT        NOT NULL DEFAULT '',
    reason         TEXT        NOT NULL DEFAULT '',
    policy_version TEXT        NOT NULL DEFAULT '',
    denial_id      TEXT        NOT NULL DEFAULT '',
    version_probe  BOOLEAN     NOT NULL DEFAULT false,
    CONSTRAINT decisions_pkey PRIMARY KEY (id),
    CONSTRAINT decisions_sandbox_check CHECK (sandbox <> ''),
    CONSTRAINT decisions_proxy_id_check CHECK (proxy_id <> ''),
    CONSTRAINT decisions_port_check CHECK (port BETWEEN 0 AND 65535)
);

CREATE INDEX decisions_sandbox_idx ON decisions (sandbox, id);
CREATE INDEX decisions_denial_id_idx ON decisions (denial_id) WHERE denial_id <> '';

-- +goose Down
DROP TABLE decisions;
DROP TABLE proxies;
DROP TABLE sandbox_cas;
DROP TABLE signing_keys;
