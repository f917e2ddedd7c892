// Package gatewayocsf maps the gateway's own records to OCSF events
// (docs/ocsf.md, field by field), pure functions over the event model of
// package ocsf: an audit-log entry is an Entity Management event (3004)
// with the actor, the outcome and the before/after hashes; a proposal with
// its prover findings is a Detection Finding (2004), and so are a
// watchdog's (Sentry) event worth a security team's attention and the
// findings the gateway derives from one, and a held call, when held and
// when it ends (its arguments never, only their digest); what the gateway did about a
// quarantine is a Remediation Activity (7001, Isolate).
//
// It lives apart from package ocsf so that the proxy, which maps only its
// decision records, links neither the store nor the Sentry schema.
package gatewayocsf
