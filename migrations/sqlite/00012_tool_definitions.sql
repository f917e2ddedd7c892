-- Pinned tool definitions, the gateway side: a denial's reason code and the
-- tool definition fingerprint it saw travel with its record, and the MCP
-- tool definitions a sandbox's proxies saw are kept, each distinct one
-- once per sandbox, endpoint and tool, so a re-pin proposal can show the
-- definition pinned and the one seen.
--
-- Times are INTEGER nanoseconds since the Unix epoch, UTC.

-- +goose Up
ALTER TABLE decisions ADD COLUMN reason_code TEXT NOT NULL DEFAULT '';
ALTER TABLE decisions ADD COLUMN tool_definition TEXT NOT NULL DEFAULT '';

-- A tool's definitions go with their sandbox. first_seen and last_seen
-- are the proxies' times of the first and the latest report of the tool
-- taking this definition.
CREATE TABLE tool_definitions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox     TEXT    NOT NULL REFERENCES sandboxes (name) ON DELETE CASCADE,
    host        TEXT    NOT NULL,
    port        INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    path        TEXT    NOT NULL,
    tool        TEXT    NOT NULL CHECK (tool <> ''),
    fingerprint TEXT    NOT NULL,
    definition  TEXT    NOT NULL DEFAULT '',
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    proxy_id    TEXT    NOT NULL CHECK (proxy_id <> ''),
    UNIQUE (sandbox, host, port, path, tool, fingerprint)
) STRICT;

CREATE INDEX tool_definitions_last_seen_idx ON tool_definitions (sandbox, last_seen);
CREATE INDEX tool_definitions_fingerprint_idx ON tool_definitions (sandbox, fingerprint);

-- +goose Down
DROP TABLE tool_definitions;
ALTER TABLE decisions DROP COLUMN tool_definition;
ALTER TABLE decisions DROP COLUMN reason_code;
