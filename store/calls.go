package store

import "time"

// A held call is one in-flight request that an allow rule with
// review.required holds at a proxy until a person decides it (CallService).
// The proxy keeps the request's bytes; the store keeps what a person needs
// to decide (the arguments, until the call is decided and a retention
// after) and the decision, which the proxy waits for.

// Held call statuses. Held is the only one a call leaves.
const (
	CallHeld     = "held"
	CallApproved = "approved"
	CallDenied   = "denied"
	CallExpired  = "expired"
	CallFailed   = "failed"
)

// HeldCall is one held call.
type HeldCall struct {
	ID      int64
	Sandbox string
	// ProxyID, Instance and Key name the call at its proxy: the proxy's
	// id, its run (a restart is a new instance), and the proxy's own
	// random name for the call (a stream opened again re-attaches by it).
	ProxyID  string
	Instance string
	Key      string
	Binary   string
	Host     string
	Port     int
	Method   string
	Path     string
	// MCPMethod and Tool are the MCP message's (empty for a REST call).
	MCPMethod string
	Tool      string
	// ArgumentsJSON is the arguments exactly as the agent sent them;
	// cleared once the call is decided and the retention has passed.
	// ArgumentsDigest stays.
	ArgumentsJSON   string
	ArgumentsDigest string
	PolicyVersion   int64
	Entry           string
	Rule            string
	TraceID         string
	Status          string
	RequestedAt     time.Time
	Deadline        time.Time
	DecidedAt       time.Time // zero while held
	DecidedBy       string
	Reason          string
	// ProposalID is the proposal an approval with remember filed (0 if
	// none).
	ProposalID int64
}

// HeldCallFilter narrows ListHeldCalls; zero fields match everything.
type HeldCallFilter struct {
	Sandbox string
	Status  string
	// Limit keeps the newest that many (0: all).
	Limit int
}

// CallApproval is one person's approval of a held call, kept while the
// approval rules ask for more approvers than have approved.
type CallApproval struct {
	Approver  string
	Reason    string
	CreatedAt time.Time
}
