// Package lifecycle owns what happens to a sandbox's policy once it is
// stored: every version commit (set, rollback, apply, freeze, unfreeze,
// the expiry of grants), proposal intake around the advisor (re-basing
// pending proposals when their base moves), review against the Rego
// approval rules, separation of duties, quorum counting and applying with
// grants, and the sweeps of expired proposals and grants. It also writes
// what the Sentry intake (gateway/sentryintake) decides: the remediation
// actions (a quarantine's freeze and its action in one transaction, an
// operator's answer to a held one, the ack time), the audit of refused
// events, and the events' own store (appends, findings' flags, retention).
// And held calls (calls.go): a call a review rule holds at its proxy,
// filed (FileCall), decided by people under the same approval rules
// (DecideCall, input.kind "call"), ended by its proxy or a new run of it
// (EndCall, FailEarlierCalls), expired and cleared by the sweep
// (SweepCalls).
//
// It is also the store's one writer. Every other part of the gateway
// holds the store as a store.Reader and writes through a Lifecycle:
// sandboxes, their boundaries and credentialed hosts (sandboxes.go),
// tokens, Sentry source keys and the signing key chain (credentials.go),
// and what proxies report (fleet.go). Where package store already keeps a
// write's record (its audit entry, its compare-and-swap), the method here
// is a thin pass-through; what it adds is the consequence the write has
// on the workflows above (a new boundary re-proves pending proposals).
//
// It works on plain domain types (store's, advisor's, prover's, policy's)
// and knows no API: the gateway's handlers translate requests into calls
// here and the results into responses, and map this package's errors
// (FieldError, NotFoundError, ConflictError, PreconditionError,
// PermissionError, RateLimitError, BusyError) to status codes.
//
// Nothing here announces a commit. The store's commit feed
// (store.Reader.ListenPolicyCommits) tells every listener of every
// version committed through any replica: the push hub of package gateway
// sends it to proxies, and Run re-bases the sandbox's pending proposals.
package lifecycle
