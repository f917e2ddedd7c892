-- Credential providers (issue 39): secrets the gateway keeps for a
-- sandbox's proxies to inject, each sealed (package secretbox: envelope
-- encryption under the --secrets-key-file key, whose id key_id is), and
-- the sandboxes each is attached to. A sandbox's credentials_generation
-- goes up with every attach, detach and rotation of its providers; a
-- proxy's status records the generation it holds, or why it holds none.
--
-- hosts and secret_fields are JSON arrays, settings a JSON object of
-- strings.

-- +goose Up
CREATE TABLE providers (
    name          TEXT        NOT NULL,
    type          TEXT        NOT NULL,
    hosts         JSONB       NOT NULL,
    settings      JSONB       NOT NULL DEFAULT '{}',
    secret_fields JSONB       NOT NULL,
    sealed        BYTEA       NOT NULL,
    key_id        TEXT        NOT NULL,
    revision      BIGINT      NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    created_by    TEXT        NOT NULL,
    rotated_at    TIMESTAMPTZ,
    rotated_by    TEXT        NOT NULL DEFAULT '',
    CONSTRAINT providers_pkey PRIMARY KEY (name),
    CONSTRAINT providers_name_check CHECK (name <> ''),
    CONSTRAINT providers_type_check CHECK (type <> ''),
    CONSTRAINT providers_sealed_check CHECK (length(sealed) > 0),
    CONSTRAINT providers_key_id_check CHECK (key_id <> ''),
    CONSTRAINT providers_revision_check CHECK (revision > 0)
);

CREATE TABLE sandbox_providers (
    sandbox     TEXT        NOT NULL,
    provider    TEXT        NOT NULL,
    attached_at TIMESTAMPTZ NOT NULL,
    attached_by TEXT        NOT NULL,
    CONSTRAINT sandbox_providers_pkey PRIMARY KEY (sandbox, provider),
    CONSTRAINT sandbox_providers_sandbox_fkey FOREIGN KEY (sandbox)
        REFERENCES sandboxes (name) ON DELETE CASCADE,
    CONSTRAINT sandbox_providers_provider_fkey FOREIGN KEY (provider)
        REFERENCES providers (name)
);

-- A provider's sandboxes (delete's check, rotation's generations).
CREATE INDEX sandbox_providers_provider_idx ON sandbox_providers (provider);

ALTER TABLE sandboxes ADD COLUMN credentials_generation BIGINT NOT NULL DEFAULT 0;
ALTER TABLE proxies
    ADD COLUMN credentials_generation BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN credentials_error TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE proxies
    DROP COLUMN credentials_error,
    DROP COLUMN credentials_generation;
ALTER TABLE sandboxes DROP COLUMN credentials_generation;
DROP TABLE sandbox_providers;
DROP TABLE providers;
