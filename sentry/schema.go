package sentry

import (
	"bytes"
	_ "embed"
)

//go:embed schema.json
var schemaJSON []byte

// SchemaJSON returns the JSON Schema (draft 2020-12) of an event: the
// envelope and the payload, the same rules ParseCloudEvent applies except
// those JSON Schema cannot state (byte sizes, duplicate keys, UTF-8,
// nesting depth). It is a copy; callers may keep it.
func SchemaJSON() []byte { return bytes.Clone(schemaJSON) }
