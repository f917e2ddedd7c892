package sentry

import (
	"encoding/json"
	"slices"
	"time"
)

// TypePrefix starts every type this schema defines: the type of an event
// of class c is TypePrefix + c.
const TypePrefix = "portcullis.sentry.v1."

// Class is what an event reports. The zero Class is an unknown type.
type Class string

// The classes this schema defines.
const (
	ClassIdentityCheck  Class = "identity_check"
	ClassToolAccess     Class = "tool_access"
	ClassPolicyDecision Class = "policy_decision"
	ClassBoundaryBreach Class = "boundary_breach"
	ClassQuarantine     Class = "quarantine"
	ClassHeartbeat      Class = "heartbeat"
)

// Classes lists every known class, in documentation order.
func Classes() []Class {
	return []Class{ClassIdentityCheck, ClassToolAccess, ClassPolicyDecision, ClassBoundaryBreach, ClassQuarantine, ClassHeartbeat}
}

// Type returns the CloudEvents type of class c.
func (c Class) Type() string { return TypePrefix + string(c) }

// TypeOf is a type an operator names (sentry events --type): a class of
// this schema (quarantine) stands for its full type; anything else is the
// type as given.
func TypeOf(s string) string {
	if slices.Contains(Classes(), Class(s)) {
		return Class(s).Type()
	}
	return s
}

// classes maps each type this schema defines to its class.
var classes = func() map[string]Class {
	m := map[string]Class{}
	for _, c := range Classes() {
		m[c.Type()] = c
	}
	return m
}()

// classOf returns the class of a CloudEvents type, or "" when the type is
// not one this schema defines.
func classOf(typ string) Class { return classes[typ] }

// Remediable reports whether an event of class c may ask for remediation:
// only a quarantine or a boundary breach can freeze a sandbox.
func (c Class) Remediable() bool { return c == ClassQuarantine || c == ClassBoundaryBreach }

// Severity grades an event, as OCSF's severity_id does (1 to 5).
type Severity string

// The severities, lowest first.
const (
	SeverityInfo     Severity = "info"
	SeverityLow      Severity = "low"
	SeverityMedium   Severity = "medium"
	SeverityHigh     Severity = "high"
	SeverityCritical Severity = "critical"
)

// Processing says what the sender wants done with an event (NVSentinel's
// processingStrategy): store it only, or act on it.
type Processing string

// The processing modes. An absent processing means ProcessingStoreOnly.
const (
	ProcessingStoreOnly Processing = "store_only"
	ProcessingRemediate Processing = "remediate"
)

// Flag marks what the reader kept without understanding it.
type Flag uint8

// The flags of Event.Flags.
const (
	// FlagUnknownType: the type is not portcullis.sentry.v1.<known class>;
	// data was kept verbatim and not interpreted.
	FlagUnknownType Flag = 1 << iota
	// FlagUnknownField: data holds fields this schema does not define.
	FlagUnknownField
	// FlagExtension: the envelope carries CloudEvents extension attributes
	// this schema does not define (kept in Event.Extensions).
	FlagExtension
	// FlagTimeDefaulted: the event had no time (CloudEvents makes it
	// optional); Time is zero here, and the intake sets it to the time it
	// received the event.
	FlagTimeDefaulted
)

// Event is one watchdog event as read from its JSON form.
type Event struct {
	// The CloudEvents 1.0 envelope.
	SpecVersion string
	ID          string
	Source      string
	Type        string
	// Time is zero when the event had none (FlagTimeDefaulted).
	Time time.Time
	// Subject is the sandbox the event is about (empty for a heartbeat).
	Subject string
	// Sequence is the source's own counter (the CloudEvents sequence
	// extension), from 1.
	Sequence        uint64
	DataContentType string

	// Class is the class of Type, "" when Type is unknown.
	Class Class
	// Data is the payload exactly as sent; Payload is what the reader
	// understood of it (zero for an unknown type).
	Data    json.RawMessage
	Payload Payload
	// Signature is the Ed25519 signature (64 bytes) or nil; see Verify.
	Signature []byte
	// Extensions holds the envelope attributes this schema does not
	// define, verbatim, by name.
	Extensions map[string]json.RawMessage

	// Raw is the event exactly as received (its JSON object), what the
	// store keeps. Raw, Data and Extensions are slices of the body the
	// event was read from, which must not change while they are in use.
	Raw json.RawMessage

	// Flags and Unknown say what was kept without being understood:
	// Unknown lists the paths ("type", "data.foo", "myext") in order.
	Flags   Flag
	Unknown []string
}

// Payload is our part of an event, the CloudEvents data.
type Payload struct {
	Severity    Severity
	Processing  Processing
	Agent       *Agent
	Process     *Process
	Node        *Node
	Policy      *PolicySeen
	Correlation *Correlation
	ToolCall    *ToolCall
	Finding     *Finding
}

// Agent is the identity the watchdog checked and the scope delegated to it.
type Agent struct {
	ID             string
	Name           string
	DelegatedScope []string
}

// Process is the process the watchdog attributes the event to.
type Process struct {
	PID        int64
	Executable string
	// ExecutableDigest is "sha256:" + 64 lower-case hex digits.
	ExecutableDigest string
}

// Node is where the watchdog runs: the host and its DPU.
type Node struct {
	ID  string
	DPU string
}

// PolicySeen is the policy the watchdog saw in force: its version and its
// hash (policy.Policy.Hash, 64 lower-case hex digits).
type PolicySeen struct {
	Version int64
	Hash    string
}

// Correlation holds the ids that join an event to the proxies' records.
type Correlation struct {
	DenialID string
	Session  string
	// JSONRPCID is the JSON-RPC id as its JSON text (a string keeps its
	// quotes), so that 7 and "7" stay different.
	JSONRPCID string
	// TraceID is a W3C trace id: 32 lower-case hex digits, not all zero.
	TraceID string
}

// ToolCall is a tool call the watchdog saw. Raw arguments are never
// accepted: only their digest.
type ToolCall struct {
	Server          string
	Tool            string
	ArgumentsDigest string
}

// Finding is what the watchdog concluded.
type Finding struct {
	Title string
	// Confidence is in [0, 1]; nil when the sender gave none.
	Confidence *float64
}
