package decision

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Decisions recorded in Record.Decision.
const (
	Allow = "allow"
	Deny  = "deny"
	// DecisionAudit: policy would deny, but the endpoint is in audit mode
	// and the request was forwarded.
	Audit = "audit"
	// RateLimited: policy allowed the tools/call, but its rule's
	// rate_limit had no token left; the request was answered 429 and not
	// forwarded. It carries a DenialID, yet is never a denial the advisor
	// turns into a proposal.
	RateLimited = "rate_limited"
)

// Record is one decision of the proxy: what was asked, by which binary,
// and the verdict with the rule and policy version behind it. A denial
// carries a DenialID that the agent can quote when it asks for access.
type Record struct {
	Time          time.Time `json:"time"`
	Sandbox       string    `json:"sandbox,omitempty"`
	Binary        string    `json:"binary,omitempty"`
	Host          string    `json:"host"`
	Port          int       `json:"port"`
	Addr          string    `json:"addr,omitempty"`
	HTTPMethod    string    `json:"http_method,omitempty"`
	Path          string    `json:"path,omitempty"`
	MCPMethod     string    `json:"mcp_method,omitempty"`
	Tool          string    `json:"tool,omitempty"` // what the MCP message names: tools/call's tool, prompts/get's prompt, a resources method's URI
	Decision      string    `json:"decision"`
	Entry         string    `json:"entry,omitempty"`
	Rule          string    `json:"rule,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	PolicyVersion string    `json:"policy_version,omitempty"`
	DenialID      string    `json:"denial_id,omitempty"`
	// VersionProbe marks a denial caused only by an unlisted MCP protocol
	// version: clients probe versions, so it is not offered to the advisor.
	VersionProbe bool `json:"version_probe,omitempty"`
	// ArgumentsDigest is, for a denied tools/call, the digest of its
	// arguments (policy.ArgumentsDigest). The arguments never go into a
	// record: the proxy keeps them a while in its Arguments memory.
	ArgumentsDigest string `json:"arguments_digest,omitempty"`
	// ReasonCode names a denial's cause where a machine acts on it:
	// "tool_definition_changed" (a pinned tool whose definition differs
	// from its pin, or could not be verified).
	ReasonCode string `json:"reason_code,omitempty"`
	// ToolDefinition is, for tool_definition_changed, the fingerprint of
	// the tool's definition the proxy saw ("" when it could verify none).
	ToolDefinition string `json:"tool_definition,omitempty"`
}

// NewDenialID returns a fresh identifier for a denial.
func NewDenialID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return "dn_" + hex.EncodeToString(b[:])
}

// Log keeps the last records in a bounded ring and hands each one
// to a writer goroutine that writes it as a JSON line. Traffic never waits
// for the writer: when its queue is full a record is counted as dropped
// (it stays in the ring) and the drop is logged.
type Log struct {
	mu   sync.Mutex
	ring []Record
	next int
	full bool

	out     io.Writer
	queue   chan Record
	dropped atomic.Int64
	log     *slog.Logger
}

// queueSize bounds the records waiting for the writer.
const queueSize = 4096

// NewLog returns a log keeping the last size records, writing each to out
// (nil: none) once Write runs.
func NewLog(size int, out io.Writer, log *slog.Logger) *Log {
	d := &Log{ring: make([]Record, size), out: out, log: log}
	if out != nil {
		d.queue = make(chan Record, queueSize)
	}
	return d
}

// Add keeps r in the ring and queues it for the writer; it never blocks.
func (d *Log) Add(r Record) {
	d.mu.Lock()
	d.ring[d.next] = r
	d.next = (d.next + 1) % len(d.ring)
	if d.next == 0 {
		d.full = true
	}
	d.mu.Unlock()
	if d.queue == nil {
		return
	}
	select {
	case d.queue <- r:
	default:
		if n := d.dropped.Add(1); n&(n-1) == 0 { // log at 1, 2, 4, 8, …
			d.log.Warn("decision log writer is behind; records dropped from the file (kept in memory)", "dropped", n)
		}
	}
}

// Write drains the queue to the writer until ctx ends, then writes what
// is left. The proxy runs it for as long as it serves.
func (d *Log) Write(ctx context.Context) {
	if d.queue == nil {
		return
	}
	enc := json.NewEncoder(d.out)
	put := func(r Record) {
		if enc == nil {
			return
		}
		if err := enc.Encode(r); err != nil {
			d.log.Error("decision log writer failed; records stay in memory only", "err", err)
			enc = nil
		}
	}
	for {
		select {
		case r := <-d.queue:
			put(r)
		case <-ctx.Done():
			for {
				select {
				case r := <-d.queue:
					put(r)
				default:
					return
				}
			}
		}
	}
}

// Dropped returns how many records the file writer has missed.
func (d *Log) Dropped() int64 { return d.dropped.Load() }

// Snapshot returns the records in the ring, oldest first.
func (d *Log) Snapshot() []Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.full {
		return append([]Record(nil), d.ring[:d.next]...)
	}
	out := make([]Record, 0, len(d.ring))
	out = append(out, d.ring[d.next:]...)
	return append(out, d.ring[:d.next]...)
}
