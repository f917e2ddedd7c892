// Package hold owns the proxy's held calls: a call an allow rule with
// `review: {required: true}` admits (policy.Decision.Review) waits here,
// its bytes in memory and nothing forwarded, until a person decides it at
// the gateway.
//
// The Registry keeps the calls waiting, within a count and a memory bound
// (past either a call is refused at once, review_busy), files each with
// the gateway through a Filer (dataplane/gatewayclient's HoldCall stream)
// and waits for its Outcome: approved only on a decision that names the
// call's id, arguments digest and policy version; review_denied,
// review_timeout (the rule's timeout passed: the gateway expires the call
// at its deadline, and the proxy ends it itself when that is 2s late),
// review_unavailable (no
// gateway, or none answering for two seconds: no filed answer, or a
// broken stream not re-attached), review_stale (a new policy version no
// longer allows the call: Registry.Recheck) or review_busy (the bounds,
// or the gateway's ResourceExhausted). Close ends every held call
// (review_unavailable). Each call waits on its own request's goroutine:
// no lock is held while waiting, so a held call never blocks other
// traffic of the sandbox.
//
// Answer is the agent's side: a tools/call whose client gave a progress
// token and accepts an event stream is answered 200 text/event-stream at
// once, with notifications/progress while it waits and the server's
// answer relayed as events after; otherwise the request just waits. A
// refusal is a JSON-RPC error (RefusedCode) or, for REST, a 403, both
// with the same fields (denial_id, reason_code, call_id, policy_version,
// reason).
package hold
