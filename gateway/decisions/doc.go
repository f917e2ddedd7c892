// Package decisions owns the bounds on the decision records proxies ship:
// each sandbox's ingest limits on this replica (token buckets in front of
// the store, one for allowed records and one for denials), summaries of
// the records they hold back, storing what passes, the retention sweep,
// and the counters of what was stored, limited and pruned.
//
// It is a package of its own, not part of distribution, because it is
// about the store's growth, not about talking to proxies: distribution
// hands it the records of a ShipDecisions stream through its Sink
// interface, and the gateway root reads its counters for metrics. It
// imports store (the records' type) and lifecycle (the store's one
// writer, which stores and prunes them).
package decisions
