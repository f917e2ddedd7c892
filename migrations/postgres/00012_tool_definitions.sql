-- Pinned tool definitions, the gateway side: a denial's reason code and the
-- tool definition fingerprint it saw travel with its record, and the MCP
-- tool definitions a sandbox's proxies saw are kept, each distinct one
-- once per sandbox, endpoint and tool, so a re-pin proposal can show the
-- definition pinned and the one seen.

-- +goose Up
ALTER TABLE decisions ADD COLUMN reason_code TEXT NOT NULL DEFAULT '';
ALTER TABLE decisions ADD COLUMN tool_definition TEXT NOT NULL DEFAULT '';

-- A tool's definitions go with their sandbox. first_seen and last_seen
-- are the proxies' times of the first and the latest report of the tool
-- taking this definition.
CREATE TABLE tool_definitions (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY,
    sandbox     TEXT        NOT NULL,
    host        TEXT        NOT NULL,
    port        INTEGER     NOT NULL,
    path        TEXT        NOT NULL,
    tool        TEXT        NOT NULL,
    fingerprint TEXT        NOT NULL,
    definition  TEXT        NOT NULL DEFAULT '',
    first_seen  TIMESTAMPTZ NOT NULL,
    last_seen   TIMESTAMPTZ NOT NULL,
    proxy_id    TEXT        NOT NULL,
    CONSTRAINT tool_definitions_pkey PRIMARY KEY (id),
    CONSTRAINT tool_definitions_key UNIQUE (sandbox, host, port, path, tool, fingerprint),
    CONSTRAINT tool_definitions_sandbox_fkey FOREIGN KEY (sandbox)
        REFERENCES sandboxes (name) ON DELETE CASCADE,
    CONSTRAINT tool_definitions_port_check CHECK (port BETWEEN 1 AND 65535),
    CONSTRAINT tool_definitions_tool_check CHECK (tool <> ''),
    CONSTRAINT tool_definitions_proxy_id_check CHECK (proxy_id <> '')
);

CREATE INDEX tool_definitions_last_seen_idx ON tool_definitions (sandbox, last_seen);
CREATE INDEX tool_definitions_fingerprint_idx ON tool_definitions (sandbox, fingerprint);

-- +goose Down
DROP TABLE tool_definitions;
ALTER TABLE decisions DROP COLUMN tool_definition;
ALTER TABLE decisions DROP COLUMN reason_code;
