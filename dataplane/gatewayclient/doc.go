// Package gatewayclient owns a gateway-mode proxy's side of the gateway:
// the Subscriber streams the sandbox's signed policy versions, verifies
// each against the pinned gateway key, applies it to the proxy (an
// Enforcer), keeps the last good one in the data dir and answers ACK or
// NACK, never applying a version older than the one it holds nor one
// that does not descend from it (a fork: a replica on a forked store) —
// which, once it holds a version with a parent, includes any newer version
// without one (a legacy version, or one whose parent was stripped, is
// taken on its number only while the proxy holds no lineage), and with a
// CredentialHolder receives the sandbox's credentials sealed to a key the
// run makes and keeps in memory (credentials.go); the
// Shipper sends decision records to the gateway in batches over the same
// connections. The gateway may be a fleet of replicas (fleet.go): the
// Subscriber streams from one at a time and moves to another when it
// fails or sends the proxy away, and the Shipper and the advisor relay
// follow it. Both run until their context ends; the dataplane Agent
// starts and waits for them.
package gatewayclient
