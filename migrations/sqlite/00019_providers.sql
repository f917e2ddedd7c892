-- Credential providers (issue 39): secrets the gateway keeps for a
-- sandbox's proxies to inject, each sealed (package secretbox: envelope
-- encryption under the --secrets-key-file key, whose id key_id is), and
-- the sandboxes each is attached to. A sandbox's credentials_generation
-- goes up with every attach, detach and rotation of its providers; a
-- proxy's status records the generation it holds, or why it holds none.
--
-- hosts and secret_fields are JSON arrays, settings a JSON object of
-- strings. Times are INTEGER nanoseconds since the Unix epoch, UTC.

-- +goose Up
CREATE TABLE providers (
    name          TEXT    PRIMARY KEY CHECK (name <> ''),
    type          TEXT    NOT NULL CHECK (type <> ''),
    hosts         TEXT    NOT NULL CHECK (json_valid(hosts)),
    settings      TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(settings)),
    secret_fields TEXT    NOT NULL CHECK (json_valid(secret_fields)),
    sealed        BLOB    NOT NULL CHECK (length(sealed) > 0),
    key_id        TEXT    NOT NULL CHECK (key_id <> ''),
    revision      INTEGER NOT NULL CHECK (revision > 0),
    created_at    INTEGER NOT NULL,
    created_by    TEXT    NOT NULL,
    rotated_at    INTEGER,
    rotated_by    TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE TABLE sandbox_providers (
    sandbox     TEXT    NOT NULL REFERENCES sandboxes (name) ON DELETE CASCADE,
    provider    TEXT    NOT NULL REFERENCES providers (name),
    attached_at INTEGER NOT NULL,
    attached_by TEXT    NOT NULL,
    PRIMARY KEY (sandbox, provider)
) STRICT;

-- A provider's sandboxes (delete's check, rotation's generations).
CREATE INDEX sandbox_providers_provider_idx ON sandbox_providers (provider);

ALTER TABLE sandboxes ADD COLUMN credentials_generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE proxies ADD COLUMN credentials_generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE proxies ADD COLUMN credentials_error TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE proxies DROP COLUMN credentials_error;
ALTER TABLE proxies DROP COLUMN credentials_generation;
ALTER TABLE sandboxes DROP COLUMN credentials_generation;
DROP TABLE sandbox_providers;
DROP TABLE providers;
