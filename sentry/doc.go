// Package sentry owns the watchdog event schema: the domain types of a
// Sentry event, the strict reader of its JSON form (one CloudEvent or a
// batch), and the signature that binds an event to its source's key.
//
// The schema is Portcullis's own — a CloudEvents 1.0 envelope around our
// payload, aligned with OCSF — and is not NVIDIA's format: no public Sentry
// schema exists. docs/sentry-events.md describes it field by field, and
// schema.json (SchemaJSON) states the same rules as a JSON Schema.
//
// The package is pure: no store, no network. Intake, storage, correlation
// and the quarantine lane build on it.
package sentry
