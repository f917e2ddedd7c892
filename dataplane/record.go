package dataplane

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Decisions recorded in Record.Decision.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	// DecisionAudit: policy would deny, but the endpoint is in audit mode
	// and the request was forwarded.
	DecisionAudit = "audit"
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
	Tool          string    `json:"tool,omitempty"`
	Decision      string    `json:"decision"`
	Entry         string    `json:"entry,omitempty"`
	Rule          string    `json:"rule,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	PolicyVersion string    `json:"policy_version,omitempty"`
	DenialID      string    `json:"denial_id,omitempty"`
	// VersionProbe marks a denial caused only by an unlisted MCP protocol
	// version: clients probe versions, so it is not offered to the advisor.
	VersionProbe bool `json:"version_probe,omitempty"`
}

// newDenialID returns a fresh identifier for a denial.
func newDenialID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return "dn_" + hex.EncodeToString(b[:])
}

// decisionLog keeps the last records in a bounded ring and writes each one
// as a JSON line. It never blocks traffic on a slow writer for long: writes
// are serialised, and a write error is logged once and the writer dropped.
type decisionLog struct {
	mu   sync.Mutex
	ring []Record
	next int
	full bool
	out  io.Writer
	enc  *json.Encoder
	log  *slog.Logger
}

func newDecisionLog(size int, out io.Writer, log *slog.Logger) *decisionLog {
	d := &decisionLog{ring: make([]Record, size), out: out, log: log}
	if out != nil {
		d.enc = json.NewEncoder(out)
	}
	return d
}

func (d *decisionLog) add(r Record) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ring[d.next] = r
	d.next = (d.next + 1) % len(d.ring)
	if d.next == 0 {
		d.full = true
	}
	if d.enc != nil {
		if err := d.enc.Encode(r); err != nil {
			d.log.Error("decision log writer failed; records stay in memory only", "err", err)
			d.enc = nil
		}
	}
}

// snapshot returns the records in the ring, oldest first.
func (d *decisionLog) snapshot() []Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.full {
		return append([]Record(nil), d.ring[:d.next]...)
	}
	out := make([]Record, 0, len(d.ring))
	out = append(out, d.ring[d.next:]...)
	return append(out, d.ring[:d.next]...)
}
