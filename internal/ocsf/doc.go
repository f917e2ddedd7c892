// Package ocsf turns Portcullis's own records into OCSF events (schema
// version Version, named in every event's metadata.version) and delivers
// them to a security team's tools: a JSON-lines file rotated by size, a
// Splunk HTTP Event Collector, or an OTLP/HTTP logs endpoint.
//
// It holds the event model (Event and its objects, with SetClass,
// SetSeverity, SetStatus and Finish, which every mapping uses), the
// sinks, and the mapping both roles share (docs/ocsf.md, field by field),
// pure: a decision record is an HTTP Activity (4002), or an API Activity
// (6003) when it is an MCP call. The gateway's own records (audit entries,
// proposals, Sentry events, findings and actions) are mapped by
// internal/ocsf/gatewayocsf, so that the proxy links neither the store
// nor the Sentry schema.
//
// Delivery never holds its caller: an Emitter queues, bounded, and one
// goroutine writes. What the queue cannot hold, and what a sink refuses,
// is dropped and counted; once the sink takes events again the emitter
// writes an Application Error event (6008) saying how many were lost.
// The vendored class definitions the tests validate against are in
// ocsftest/schema, with OCSF's licence.
package ocsf
