// Package ocsf turns Portcullis's own records into OCSF events (schema
// version Version, named in every event's metadata.version) and delivers
// them to a security team's tools: a JSON-lines file rotated by size, a
// Splunk HTTP Event Collector, or an OTLP/HTTP logs endpoint.
//
// The mapping (docs/ocsf.md, field by field) is pure: a proxy's decision
// is an HTTP Activity (4002), or an API Activity (6003) when it is an MCP
// call; an audit-log entry is an Entity Management event (3004) with the
// actor, the outcome and the before/after hashes; a proposal with its
// prover findings is a Detection Finding (2004), and so are a watchdog's
// (Sentry) event worth a security team's attention and the findings the
// gateway derives from one; what the gateway did about a quarantine is a
// Remediation Activity (7001, Isolate).
//
// Delivery never holds its caller: an Emitter queues, bounded, and one
// goroutine writes. What the queue cannot hold, and what a sink refuses,
// is dropped and counted; once the sink takes events again the emitter
// writes an Application Error event (6008) saying how many were lost.
// The vendored class definitions the tests validate against are in
// ocsftest/schema, with OCSF's licence.
package ocsf
