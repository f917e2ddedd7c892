// Package gatewayclient owns a gateway-mode proxy's side of the gateway:
// the Subscriber streams the sandbox's signed policy versions, verifies
// each against the pinned gateway key, applies it to the proxy (an
// Enforcer), keeps the last good one in the data dir and answers ACK or
// NACK; the Shipper sends decision records to the gateway in batches over
// the same connection. Both run until their context ends; the dataplane
// Agent starts and waits for them.
package gatewayclient
