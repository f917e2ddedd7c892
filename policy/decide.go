package policy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// This file is the reference evaluator: the definition of what a policy
// allows. It is written to be read, not to be fast. Each semantic rule
// lives in one function whose comment states it; Decide only composes them.
//
// The order of evaluation:
//
//  1. Hard denials, whatever the policy says and even in audit mode:
//     malformed requests, always-denied addresses and ports
//     (destinationDenied).
//  2. Deny rules win everywhere: every deny rule of every endpoint whose
//     destination (host, port, path scope) matches is checked, in every
//     entry and for every binary (denyPhase, decide_deny.go). A deny rule
//     that cannot be checked (no L7 view of the request, a protocol not
//     inspected yet, an invalid tool name) denies hard.
//  3. Allow: the candidates are the endpoints of the entries whose binaries
//     match and whose destination matches (decide_destination.go); each is
//     judged by its address rules and then its protocol (judgeCandidate;
//     decide_rest.go, decide_mcp.go). An allow that only rules with
//     review.required give is a reviewed allow (Decision.Review): any
//     allow without review wins over it.
//  4. Default deny. `enforcement: audit` on the deciding endpoint turns a
//     rule denial into Allow with Audit set (combine).

// Request is one request as the proxy sees it. Decide judges complete
// requests: for L7 endpoints the HTTP fields must be set.
type Request struct {
	Binary string     // absolute path of the calling executable; "" when it cannot be determined
	Host   string     // destination as requested (DNS name or IP literal)
	Addr   netip.Addr // the resolved IP the proxy will dial; zero when unknown (then only an IP-literal Host is checked)
	Port   int
	// Ancestors are the executables of the caller's parent, grandparent and
	// so on, parent first (OpenShell's exec.ancestors). A rule's binary
	// matches when it matches Binary or any ancestor: a git rule lets the
	// python3 that git runs through. Ignored when Binary is "": an unknown
	// caller matches no rule that names binaries.
	Ancestors []string
	// L7 — set when the proxy sees the HTTP request (REST, MCP)
	HTTPMethod string
	Path       string      // as received (Decide canonicalizes with the endpoint's allow_encoded_slash)
	Query      string      // raw query string
	MCP        *MCPMessage // the JSON-RPC message, for protocol mcp POSTs (nil for GET/DELETE)

	Time             time.Time // for expires_at; zero means time.Now()
	DevAllowLoopback bool
}

// MCPMessage is one client→server JSON-RPC message on an MCP endpoint.
type MCPMessage struct {
	Method          string          // JSON-RPC method ("" for a client→server response)
	Tool            string          // params.name for tools/call
	Prompt          string          // params.name for prompts/get
	Resource        string          // params.uri for resources/read, resources/subscribe, resources/unsubscribe
	Arguments       json.RawMessage // params.arguments
	ProtocolVersion string          // the version the proxy established ("" if none given)
	Response        bool            // a client→server JSON-RPC response (answer to elicitation/sampling): passes once the endpoint matches
	// AnyArguments judges a tools/call as if its arguments satisfied every
	// arguments_schema: would the tool be allowed for some arguments? (The
	// proxy lists the tools the agent may call.)
	AnyArguments bool
	// ToolDefinition is the fingerprint of the tool's definition as the
	// proxy verified it ("" when none is verified): a rule that pins a
	// definition allows the call only when it is that one.
	ToolDefinition string
	// AnyDefinition judges a tools/call as if the tool's definition were
	// the one every rule pins (the prover's probes, which judge pins
	// apart).
	AnyDefinition bool
	// ArgumentsRead says Arguments came from a strict JSON reader (the
	// proxy's MCP parser), so MalformedMCP need not check them again.
	ArgumentsRead bool
}

// Decision is the verdict on one request.
type Decision struct {
	Allow    bool
	Audit    bool   // denied by rules but let through because the matching endpoint has enforcement: audit
	Entry    string // network_policies key that allowed or whose rule denied ("" if none)
	Endpoint int    // index in that entry's endpoints, -1 if none
	Rule     string // e.g. "rules[2]", "deny_rules[0]", "access: read-only", "allow_all_known_mcp_methods"
	// Reason is human-readable. A denial names the method, path or tool and
	// the rule; an allow names only the rule (the request is in the
	// decision record), so the proxy's matcher can answer allows without
	// building a string.
	Reason         string
	VersionRefused bool // denied only because the MCP protocol version is not listed (not offered to the advisor)
	// DefinitionRefused: denied naming a rule that pins the tool's
	// definition, which differs from the verified one or was not verified
	// (tool_definition_changed).
	DefinitionRefused bool
	// ReasonCode, set by the proxy (never by Decide), is a denial's
	// machine-readable code when a check after the policy's made it
	// (dataplane/credentials' credential_unavailable, …).
	ReasonCode string
	// Review, above 0, makes an allow a reviewed allow: the rule that
	// decides has review.required, and the call is forwarded only once a
	// person approves it, within this timeout (a held call). A request
	// that any rule allows without review is allowed without review: an
	// allow needs review only when every allow rule that admits it does.
	Review time.Duration
}

// Decide returns the decision of policy p on request r. A nil policy denies
// everything.
func Decide(p *Policy, r Request) Decision {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if d, denied := destinationDenied(r); denied {
		return d
	}
	eps := endpointsOf(p)
	denials := denyPhase(eps, r)
	var outs []outcome
	for _, ep := range eps {
		if destinationMatches(ep, r) && binaryMatches(ep.entry, r) {
			outs = append(outs, judgeCandidate(ep, r))
		}
	}
	return combine(denials, outs, eps, r)
}

// ---------------------------------------------------------------------------
// 1. Hard denials.

// destinationDenied applies the rules no policy can override: the request
// must name a destination and a valid port; loopback (unless the proxy runs
// with --dev-allow-loopback), link-local, unspecified, multicast, broadcast
// and cloud-metadata addresses are denied — checked on the resolved Addr,
// on an IP-literal Host, and on metadata and localhost names; control-plane
// ports are denied. An IP-literal Host must equal the address dialled.
func destinationDenied(r Request) (Decision, bool) {
	deny := func(reason string) (Decision, bool) {
		return Decision{Endpoint: -1, Reason: reason}, true
	}
	if strings.TrimSpace(r.Host) == "" && !r.Addr.IsValid() {
		return deny("request names no destination")
	}
	if r.Port < 1 || r.Port > 65535 {
		return deny(fmt.Sprintf("port %d is not a valid port", r.Port))
	}
	if DeniedPort(r.Port) {
		return deny(fmt.Sprintf("port %d is a cluster control-plane port and always denied", r.Port))
	}
	if IsMetadataHost(r.Host) {
		return deny(fmt.Sprintf("host %q is a cloud metadata service and always denied", r.Host))
	}
	if IsLoopbackName(r.Host) && !r.DevAllowLoopback {
		return deny(fmt.Sprintf("host %q is loopback and always denied", r.Host))
	}
	literal, isLiteral := ParseHostIP(r.Host)
	if isLiteral {
		if why, denied := AlwaysDenied(literal, r.DevAllowLoopback); denied {
			return deny(fmt.Sprintf("host %q is always denied: %s", r.Host, why))
		}
	}
	if r.Addr.IsValid() {
		if why, denied := AlwaysDenied(r.Addr, r.DevAllowLoopback); denied {
			return deny(fmt.Sprintf("%s resolves to an always-denied destination: %s", r.Host, why))
		}
		if isLiteral && literal != r.Addr.Unmap().WithZone("") {
			return deny(fmt.Sprintf("host %q is the IP address %s but the proxy would dial %s", r.Host, literal, r.Addr))
		}
	}
	return Decision{}, false
}

// ---------------------------------------------------------------------------
// 3. Candidates: an entry whose binary and destination match.

// outcome is one candidate endpoint's verdict.
type outcome struct {
	ep             endpointRef
	allow          bool
	rule           string
	reason         string
	hard           bool // a denial audit mode cannot lift
	versionRefused bool // denied only because the MCP version is not listed
	// definitionRefused: the rule named is one whose pinned definition the
	// tool's does not match.
	definitionRefused bool
	// review, above 0: the allow is a reviewed one (the rule that allows
	// has review.required), held this long for a person.
	review time.Duration
}

// judgeCandidate judges r on one endpoint it is addressed to: first the
// address rules (addressAllowed), then the endpoint's protocol.
func judgeCandidate(e endpointRef, r Request) outcome {
	if why, ok := addressAllowed(e.ep, r); !ok {
		return outcome{ep: e, hard: true, reason: why}
	}
	switch e.ep.Protocol {
	case ProtocolL4, ProtocolTCP:
		// tcp is OpenShell's transparent TCP: an L4 connection, allowed
		// as a whole (through the transparent listener or CONNECT).
		return outcome{ep: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("allowed by %s (no L7 inspection)", e.name())}
	case ProtocolREST:
		return judgeREST(e, r)
	case ProtocolMCP:
		return judgeMCP(e, r)
	default:
		// Divergence from OpenShell, toward safety: protocols the proxy
		// does not inspect yet deny everything, even in audit mode.
		return outcome{ep: e, hard: true,
			reason: fmt.Sprintf("protocol %s is not inspected yet, so %s denies every request", e.ep.Protocol, e.name())}
	}
}

// addressAllowed applies allowed_ips. When the endpoint lists allowed_ips,
// the destination address must be inside them. Otherwise a private,
// shared or special-purpose address (IsPrivate) is refused — even for an
// exact hostname (a divergence from OpenShell, which trusts exact names).
// When no address is known (a DNS name not yet resolved), there is nothing
// to check here; the proxy checks the address it dials.
func addressAllowed(ep *Endpoint, r Request) (string, bool) {
	addr, ok := destinationAddr(r)
	if !ok {
		return "", true
	}
	if len(ep.AllowedIPs) > 0 {
		if addrInAllowedIPs(ep.AllowedIPs, addr) {
			return "", true
		}
		return fmt.Sprintf("%s (%s) is outside the allowed_ips of %s", r.Host, addr, EndpointLabel(ep)), false
	}
	if IsPrivate(addr) {
		return fmt.Sprintf("%s resolves to the private address %s, which needs allowed_ips on %s", r.Host, addr, EndpointLabel(ep)), false
	}
	return "", true
}

// requireL7 is the outcome of an L7 endpoint given a request without L7
// information: it does not allow, and audit cannot change that.
func requireL7(e endpointRef) outcome {
	return outcome{ep: e, hard: true,
		reason: fmt.Sprintf("%s inspects %s requests, and this request was not inspected", e.name(), e.ep.Protocol)}
}

// ---------------------------------------------------------------------------
// 4. Combination, audit mode and default deny.

func isAudit(ep *Endpoint) bool { return ep.Enforcement == EnforcementAudit }

// combine turns deny-rule matches and candidate outcomes into the decision:
//   - a hard denial from the deny phase, or a deny rule on an enforcing
//     endpoint, denies;
//   - deny rules that matched only on audit endpoints let the request
//     through with Audit set — when some candidate would allow it (or
//     would audit it through); audit never grants what no entry grants,
//     and never lifts a review: when the candidate that allows needs one,
//     the audited allow does too;
//   - otherwise the first candidate that allows without review allows;
//     failing that, the first that allows after review (Decision.Review:
//     an allow needs review only when every rule that admits it does);
//   - otherwise a rule denial (not hard) on an audit candidate is let
//     through with Audit set;
//   - otherwise deny, with the first candidate's reason (VersionRefused
//     only when every candidate refused only the version), or the default
//     deny when no entry grants this binary this destination.
func combine(denials []denial, outs []outcome, eps []endpointRef, r Request) Decision {
	for _, d := range denials {
		if d.hard || !isAudit(d.ep.ep) {
			return Decision{Entry: d.ep.key, Endpoint: d.ep.index, Rule: d.rule, Reason: d.reason}
		}
	}
	var allowed, audited *outcome
	for i := range outs {
		o := &outs[i]
		if o.allow && (allowed == nil || allowed.review > 0 && o.review == 0) {
			allowed = o
		}
		if !o.allow && !o.hard && isAudit(o.ep.ep) && audited == nil {
			audited = o
		}
	}
	if len(denials) > 0 && (allowed != nil || audited != nil) {
		d := denials[0]
		dec := Decision{Allow: true, Audit: true, Entry: d.ep.key, Endpoint: d.ep.index, Rule: d.rule,
			Reason: "audit: " + d.reason}
		if allowed != nil {
			dec.Review = allowed.review
		}
		return dec
	}
	if allowed != nil {
		return Decision{Allow: true, Entry: allowed.ep.key, Endpoint: allowed.ep.index, Rule: allowed.rule, Reason: allowed.reason, Review: allowed.review}
	}
	if audited != nil {
		return Decision{Allow: true, Audit: true, Entry: audited.ep.key, Endpoint: audited.ep.index, Rule: audited.rule,
			Reason: "audit: " + audited.reason}
	}
	if len(outs) > 0 {
		o := outs[0]
		refused := true
		for _, x := range outs {
			refused = refused && x.versionRefused
		}
		return Decision{Entry: o.ep.key, Endpoint: o.ep.index, Rule: o.rule, Reason: o.reason, VersionRefused: refused, DefinitionRefused: o.definitionRefused}
	}
	return Decision{Endpoint: -1, Reason: defaultDenyReason(eps, r)}
}

// defaultDenyReason explains a default deny: no endpoint matches the
// destination, or the ones that do belong to entries that do not list the
// binary.
func defaultDenyReason(eps []endpointRef, r Request) string {
	var entries []string
	for _, e := range eps {
		name := "network_policies." + e.key
		if destinationMatches(e, r) && !slices.Contains(entries, name) {
			entries = append(entries, name)
		}
	}
	return DefaultDenyReason(&r, entries)
}
