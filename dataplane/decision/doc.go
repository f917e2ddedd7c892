// Package decision owns the proxy's side of decision records (the Record
// itself, what both roles share, is package decision at the module's
// root): the Log that keeps the recent ones in a bounded ring
// (policy.local's denials read it) while a writer goroutine appends them
// to a file as JSON lines — what arrives within FlushInterval in one
// write — without ever holding traffic. The shipper to the gateway
// consumes the same Records. A denied tools/call's record carries only the
// digest of its arguments; Arguments keeps the arguments themselves for a
// while, in memory and bounded, for policy.local. Before a record is kept,
// Bound cuts its long fields (keeping their length and SHA-256), and the
// Summarizer counts a flood of similar denials into one summary record
// past each kind's budget, so that denials never crowd allowed records
// out of the ring, the file or the shipper.
package decision
