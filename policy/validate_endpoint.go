package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// This file holds the checks on one endpoint: its host, ports, allowed_ips,
// access and protocol options, and credential bindings.

func isL7(protocol string) bool {
	return protocol != ProtocolL4 && protocol != ProtocolTCP
}

func hasGlobMeta(s string) bool { return strings.ContainsAny(s, "*?[") }

func (v *validator) endpoint(path string, ep *Endpoint) {
	proto := ep.Protocol
	knownProto := true
	switch proto {
	case ProtocolL4, ProtocolTCP, ProtocolREST, ProtocolMCP, ProtocolWebSocket, ProtocolGraphQL, ProtocolJSONRPC, ProtocolSQL:
	default:
		knownProto = false
		v.errorf(keyPath(path, "protocol"), "must be one of tcp, rest, websocket, graphql, mcp, json-rpc, sql (or omitted for L4)")
	}
	switch proto {
	case ProtocolWebSocket:
		v.warnf(keyPath(path, "protocol"), "the Portcullis proxy does not support protocol websocket yet and denies every request to this endpoint; protocol rest with websocket_credential_rewrite: true carries a WebSocket, its messages read")
	case ProtocolGraphQL, ProtocolJSONRPC, ProtocolSQL:
		v.warnf(keyPath(path, "protocol"), "the Portcullis proxy does not support protocol %s yet and denies every request to this endpoint", proto)
	}

	v.host(path, ep)
	v.ports(path, ep)

	if ep.Path != "" {
		pp := keyPath(path, "path")
		if !isL7(proto) {
			v.errorf(pp, "needs an HTTP protocol (rest, mcp, graphql, websocket, json-rpc)")
		} else if !strings.HasPrefix(ep.Path, "/") && !strings.HasPrefix(ep.Path, "*") {
			v.errorf(pp, "must start with /")
		} else if err := ValidDenyPathGlob(ep.Path); err != nil {
			v.errorf(pp, "%v", err)
		} else {
			v.singleStar(pp, ep.Path)
			v.allowBraces(pp, ep.Path)
		}
	}

	switch ep.TLS {
	case "":
	case "skip":
		if isL7(proto) && slices.Contains(EndpointPorts(ep), 443) {
			v.warnf(keyPath(path, "tls"), "skip on port 443 with protocol %s: OpenShell does not terminate TLS on this endpoint, so its L7 rules never see the HTTPS requests; remove tls: skip to have them inspected", proto)
		}
	case "terminate", "passthrough":
		v.warnf(keyPath(path, "tls"), "%s is a deprecated no-op", ep.TLS)
	default:
		v.errorf(keyPath(path, "tls"), "must be skip (or omitted for automatic detection)")
	}

	switch ep.Enforcement {
	case EnforcementEnforce, EnforcementAudit:
	case "":
		if isL7(proto) && knownProto {
			v.warnf(keyPath(path, "enforcement"), "OpenShell treats an omitted enforcement as audit; Portcullis enforces")
		}
	default:
		v.errorf(keyPath(path, "enforcement"), "must be enforce or audit")
	}

	v.access(path, ep, knownProto)
	v.allowedIPs(path, ep)
	v.credentials(path, ep)
	v.protocolOptions(path, ep)
}

func (v *validator) host(path string, ep *Endpoint) {
	hp := keyPath(path, "host")
	if ep.Host == "" {
		// OpenShell's hostless endpoint: it matches any host whose
		// resolved address its allowed_ips cover.
		switch {
		case len(ep.AllowedIPs) == 0:
			v.errorf(hp, "is required unless allowed_ips is set (a hostless endpoint matches by address)")
		case ep.Protocol == ProtocolMCP:
			v.errorf(hp, "is required: an mcp endpoint needs a concrete host")
		case ep.Protocol == ProtocolTCP:
			// OpenShell: transparent TCP resolves the name through
			// policy DNS; a hostless allowed_ips endpoint is a forward
			// proxy shape only.
			v.errorf(hp, "is required with protocol tcp (a DNS hostname); hostless allowed_ips endpoints are supported only by the forward proxy")
		}
		return
	}
	if IsMetadataHost(ep.Host) {
		v.metadata(hp, "names a cloud metadata address, which no policy may open")
		return
	}
	if err := ValidHostPattern(ep.Host); err != nil {
		v.errorf(hp, "%v", err)
		return
	}
	h := canonicalHost(ep.Host)
	if ep.Protocol == ProtocolMCP && strings.Contains(h, "*") {
		v.errorf(hp, "an mcp endpoint needs a concrete host, not a wildcard")
	}
	if IsLoopbackName(h) {
		v.warnf(hp, "is loopback, which is always denied (except with the proxy's --dev-allow-loopback)")
		return
	}
	if addr, ok := ParseHostIP(h); ok {
		if reason, denied := AlwaysDenied(addr, false); denied {
			v.warnf(hp, "is a %s, which is always denied%s", reason, loopbackNote(reason))
			return
		}
		if IsPrivate(addr) && !allowedIPsCover(ep.AllowedIPs, addr) {
			v.warnf(hp, "is a private address; Portcullis denies it unless allowed_ips covers it (OpenShell trusts exact hosts)")
		}
		return
	}
	// One note per document: it applies to every exact hostname alike,
	// and repeating it per endpoint would bury the warnings that matter.
	if !strings.Contains(h, "*") && len(ep.AllowedIPs) == 0 && !v.privateNoted {
		v.privateNoted = true
		v.warns = appendProblem(v.warns, Problem{Path: hp, Code: CodePrivateResolution,
			Message: "exact hostnames without allowed_ips are denied if they resolve to a private address (OpenShell allows it)"})
	}
}

func loopbackNote(reason string) string {
	if strings.HasPrefix(reason, "loopback") {
		return " (except with the proxy's --dev-allow-loopback)"
	}
	return ""
}

func allowedIPsCover(entries []string, addr netip.Addr) bool {
	for _, e := range entries {
		if p, err := parseAllowedIP(e); err == nil && p.Contains(addr.Unmap()) {
			return true
		}
	}
	return false
}

func (v *validator) ports(path string, ep *Endpoint) {
	if ep.Port == 0 && len(ep.Ports) == 0 {
		v.errorf(keyPath(path, "port"), "port or ports is required")
	}
	if ep.Port != 0 && (ep.Port < 1 || ep.Port > 65535) {
		v.errorf(keyPath(path, "port"), "must be between 1 and 65535")
	}
	for i, port := range ep.Ports {
		if port < 1 || port > 65535 {
			v.errorf(indexPath(keyPath(path, "ports"), i), "must be between 1 and 65535")
		}
	}
	if ep.Port != 0 && len(ep.Ports) > 0 {
		// OpenShell refuses the pair; reading one and ignoring the other
		// would grant a port the author may not have meant.
		v.errorf(keyPath(path, "port"), "port and ports are mutually exclusive; use ports for several ports")
	}
	for _, port := range EndpointPorts(ep) {
		if DeniedPort(port) {
			v.warnf(path, "port %d is a cluster control-plane port, which is always denied", port)
		}
	}
}

// access checks access, rules and deny_rules against the protocol.
func (v *validator) access(path string, ep *Endpoint, knownProto bool) {
	proto := ep.Protocol
	ap, rp, dp := keyPath(path, "access"), keyPath(path, "rules"), keyPath(path, "deny_rules")
	switch ep.Access {
	case "", AccessReadOnly, AccessReadWrite, AccessFull:
	default:
		// As OpenShell (expand_access_presets): an unknown preset is
		// ignored with a warning, and expands to no rule.
		v.warnf(ap, "%q is not an access preset (read-only, read-write, full); it is ignored, as OpenShell ignores it, so it allows no request", ep.Access)
	}
	if ep.Rules != nil && len(ep.Rules) == 0 {
		v.errorf(rp, "must not be empty (use access: full, or remove rules)")
	}
	if ep.DenyRules != nil && len(ep.DenyRules) == 0 {
		v.errorf(dp, "must not be empty (remove it if no denials are needed)")
	}
	hasRules := len(ep.Rules) > 0
	if ep.Access != "" && hasRules {
		v.errorf(ap, "access and rules are mutually exclusive")
	}
	if !isL7(proto) {
		if ep.Access != "" {
			v.errorf(ap, "needs an L7 protocol")
		}
		if ep.Rules != nil {
			v.errorf(rp, "need an L7 protocol")
		}
		if ep.DenyRules != nil {
			v.errorf(dp, "need an L7 protocol")
		}
		return
	}
	if !knownProto {
		return
	}
	allowAll := proto == ProtocolMCP && allowAllKnown(ep)
	switch proto {
	case ProtocolMCP, ProtocolJSONRPC:
		if ep.Access != "" {
			v.errorf(ap, "is not valid on protocol %s; use explicit rules", proto)
		}
		if ep.Rules == nil && !allowAll {
			if proto == ProtocolMCP {
				v.errorf(rp, "are required on protocol mcp unless mcp.allow_all_known_mcp_methods is true")
			} else {
				v.errorf(rp, "are required on protocol json-rpc")
			}
		}
	default:
		if ep.Access == "" && ep.Rules == nil {
			v.errorf(rp, "access or rules is required on protocol %s", proto)
		}
	}
	if hasRules {
		effective := 0
		for _, r := range ep.Rules {
			if r.Allow != nil {
				effective++
			}
		}
		if effective == 0 {
			v.errorf(rp, "no entry has an allow clause; this would deny everything")
		}
	}
	for i, r := range ep.Rules {
		if r.Allow == nil {
			continue
		}
		v.rule(keyPath(indexPath(rp, i), "allow"), ep, r.Allow, true)
	}
	for i, r := range ep.DenyRules {
		rpath := indexPath(dp, i)
		if r == nil {
			v.errorf(rpath, "must be a rule mapping")
			continue
		}
		v.rule(rpath, ep, r, false)
	}
	if proto == ProtocolMCP {
		v.mcpToolMixing(path, ep, allowAll)
	}
}

// parseAllowedIP parses an allowed_ips entry strictly: an IP address or a
// CIDR prefix in standard notation, without zone. A single address becomes
// a full-length prefix.
func parseAllowedIP(s string) (netip.Prefix, error) {
	if strings.Contains(s, "%") {
		return netip.Prefix{}, errors.New("must not carry an IPv6 zone")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("is not an IP address or CIDR prefix")
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
			if !p.IsValid() {
				return netip.Prefix{}, fmt.Errorf("is not an IP address or CIDR prefix")
			}
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("is not an IP address or CIDR prefix")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func (v *validator) allowedIPs(path string, ep *Endpoint) {
	ap := keyPath(path, "allowed_ips")
	for i, e := range ep.AllowedIPs {
		p := indexPath(ap, i)
		prefix, err := parseAllowedIP(e)
		if err != nil {
			v.errorf(p, "%q %v", e, err)
			continue
		}
		m, aimed, hasMetadata := metadataIn(prefix)
		if aimed {
			v.metadata(p, fmt.Sprintf("names cloud metadata address %s, which no policy may open", m))
			continue
		}
		if reason, bad := AllowedIPsOverlap(prefix); bad {
			v.errorf(p, "%s, which no policy may open", reason)
			continue
		}
		if hasMetadata {
			v.warnf(p, "contains cloud metadata address %s, which stays denied", m)
		}
		if prefix.Masked() != prefix {
			v.warnf(p, "%q has host bits set; it means %s", e, prefix.Masked())
		}
	}
}

// metadataIn returns a metadata address inside prefix, directly or as the
// IPv4 address one of its IPv6 forms carries (IPv4-mapped, NAT64, SIIT,
// 6to4, Teredo, …), and whether the entry is aimed at it: a narrow entry
// (IPv4 /24 or longer, IPv6 /64 or longer) holding it, or an IPv6 form
// whose prefix fixes every bit of the carried address. A wide private
// block (fc00::/7) merely contains it.
func metadataIn(prefix netip.Prefix) (m netip.Addr, aimed, found bool) {
	prefix = prefix.Masked()
	for _, m := range metadataAddrs {
		if prefix.Contains(m) {
			narrow := prefix.Addr().Is4() && prefix.Bits() >= 24 || prefix.Addr().Is6() && prefix.Bits() >= 64
			return m, narrow, true
		}
	}
	if !prefix.Addr().Is6() {
		return netip.Addr{}, false, false
	}
	for _, m := range metadataAddrs {
		if !m.Is4() {
			continue
		}
		for i := range carriers {
			e := &carriers[i]
			if e.carries(prefix, netip.PrefixFrom(m, 32)) {
				return m, e.pins(prefix), true
			}
		}
	}
	return netip.Addr{}, false, false
}

func (v *validator) credentials(path string, ep *Endpoint) {
	cs := keyPath(path, "credential_signing")
	switch ep.CredentialSigning {
	case "":
		if ep.SigningService != "" {
			v.warnf(keyPath(path, "signing_service"), "is ignored without credential_signing")
		}
		if ep.SigningRegion != "" {
			v.warnf(keyPath(path, "signing_region"), "is ignored without credential_signing")
		}
	case "sigv4", "sigv4:body", "sigv4:no_body":
		if ep.SigningService == "" {
			v.errorf(keyPath(path, "signing_service"), "is required with credential_signing")
		}
		if ep.RequestBodyCredentialRewrite {
			v.errorf(cs, "credential_signing and request_body_credential_rewrite are mutually exclusive")
		}
	default:
		v.errorf(cs, "must be sigv4, sigv4:body or sigv4:no_body")
	}
	if ep.CredentialBinding != nil && ep.CredentialBinding.Provider == "" {
		v.errorf(keyPath(keyPath(path, "credential_binding"), "provider"), "is required")
	}
	if ep.CredentialBinding != nil && !ep.AllowUninspectedCredentials && (!isL7(ep.Protocol) || ep.TLS == "skip") {
		v.errorf(keyPath(path, "credential_binding"), "a credentialed endpoint must be inspected: set an L7 protocol without tls: skip, or allow_uninspected_credentials: true")
	}
	if ep.RequestBodyCredentialRewrite && ep.Protocol != ProtocolREST {
		v.warnf(keyPath(path, "request_body_credential_rewrite"), "has no effect outside protocol rest")
	}
	if ep.WebsocketCredentialRewrite && ep.Protocol != ProtocolREST && ep.Protocol != ProtocolWebSocket {
		v.warnf(keyPath(path, "websocket_credential_rewrite"), "has no effect outside protocol rest or websocket")
	}
	if ep.AllowUninspectedCredentials {
		v.warnf(keyPath(path, "allow_uninspected_credentials"), "lets credentialed traffic pass without inspection")
	}
}

func (v *validator) bodyLimit(path string, n int) {
	if n < 0 {
		v.errorf(path, "must be > 0")
	} else if n > maxBodyBytesLimit {
		v.errorf(path, "must be at most %d", maxBodyBytesLimit)
	}
}

// onlyOn refuses the option at path unless ok (the endpoint's protocol is
// one of protocols, as the message names them), and reports ok, so the
// option's own checks run only where it applies.
func (v *validator) onlyOn(path string, ok bool, protocols string) bool {
	if !ok {
		v.errorf(path, "is only valid on protocol %s", protocols)
	}
	return ok
}

func (v *validator) protocolOptions(path string, ep *Endpoint) {
	proto := ep.Protocol
	if ep.MCP != nil {
		mp := keyPath(path, "mcp")
		if v.onlyOn(mp, proto == ProtocolMCP, "mcp") {
			v.bodyLimit(keyPath(mp, "max_body_bytes"), ep.MCP.MaxBodyBytes)
			v.bodyLimit(keyPath(mp, "max_response_bytes"), ep.MCP.MaxResponseBytes)
			v.mcpOAuth(keyPath(mp, "oauth"), ep)
			vp := keyPath(mp, "versions")
			if ep.MCP.Versions != nil && len(ep.MCP.Versions) == 0 {
				v.errorf(vp, "must not be empty (omit it for the default)")
			}
			for i, ver := range ep.MCP.Versions {
				switch {
				case !mcpVersionFmt.MatchString(ver):
					v.errorf(indexPath(vp, i), "%q is not an MCP version (YYYY-MM-DD)", ver)
				case !knownMCPVersions[ver]:
					v.errorf(indexPath(vp, i), "%q is not a known MCP version (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28)", ver)
				}
			}
		}
	}
	if ep.JSONRPC != nil {
		jp := keyPath(path, "json_rpc")
		if v.onlyOn(jp, proto == ProtocolJSONRPC, "json-rpc") {
			v.bodyLimit(keyPath(jp, "max_body_bytes"), ep.JSONRPC.MaxBodyBytes)
		}
	}
	graphQL := proto == ProtocolGraphQL || proto == ProtocolWebSocket
	if ep.GraphQLMaxBodyBytes != 0 {
		gp := keyPath(path, "graphql_max_body_bytes")
		if v.onlyOn(gp, graphQL, "graphql or websocket") {
			v.bodyLimit(gp, ep.GraphQLMaxBodyBytes)
		}
	}
	pq := keyPath(path, "persisted_queries")
	switch ep.PersistedQueries {
	case "":
	case "deny", "allow_registered":
		v.onlyOn(pq, graphQL, "graphql or websocket")
		if ep.PersistedQueries == "allow_registered" && len(ep.GraphQLPersistedQueries) == 0 {
			v.errorf(pq, "allow_registered needs graphql_persisted_queries")
		}
	default:
		v.errorf(pq, "must be deny or allow_registered")
	}
	if ep.GraphQLPersistedQueries != nil {
		gq := keyPath(path, "graphql_persisted_queries")
		v.onlyOn(gq, graphQL, "graphql or websocket")
		for _, k := range sortedKeys(ep.GraphQLPersistedQueries) {
			qp := keyPath(gq, k)
			q := ep.GraphQLPersistedQueries[k]
			if k == "" {
				v.errorf(qp, "key must not be empty")
			}
			if q == nil {
				v.errorf(qp, "must be a mapping with operation_type")
				continue
			}
			switch q.OperationType {
			case "query", "mutation", "subscription":
			case "":
				v.errorf(keyPath(qp, "operation_type"), "is required")
			default:
				v.errorf(keyPath(qp, "operation_type"), "must be query, mutation or subscription")
			}
		}
	}
}

// mcpOAuth checks mcp.oauth's declared paths: each list needs the role
// it extends, and each path is one plain absolute path, canonical, with
// no glob, query or trailing slash, and not the endpoint's MCP path.
func (v *validator) mcpOAuth(path string, ep *Endpoint) {
	o := ep.MCP.OAuth
	if o == nil {
		return
	}
	check := func(field string, paths []string, role bool, roleName string) {
		fp := keyPath(path, field)
		if len(paths) > 0 && !role {
			v.errorf(fp, "needs %s: true", roleName)
		}
		if len(paths) > 16 {
			v.errorf(fp, "lists %d paths; at most 16", len(paths))
		}
		for i, p := range paths {
			canon, err := CanonicalPath(p, false)
			switch {
			case !strings.HasPrefix(p, "/") || p == "/" || strings.HasSuffix(p, "/"):
				v.errorf(indexPath(fp, i), "%q must be an absolute path other than /, without a trailing /", p)
			case strings.ContainsAny(p, "*?#{}[]%;\\") || err != nil || canon != p:
				v.errorf(indexPath(fp, i), "%q must be one plain canonical path (no glob, query, escape or dot segment)", p)
			case len(p) > 256:
				v.errorf(indexPath(fp, i), "is %d bytes long; at most 256", len(p))
			case ep.Path != "" && p == ep.Path:
				v.errorf(indexPath(fp, i), "%q is the endpoint's MCP path", p)
			}
		}
	}
	check("resource_metadata_paths", o.ResourceMetadataPaths, o.ResourceMetadata, "resource_metadata")
	check("issuer_paths", o.IssuerPaths, o.AuthorizationServer, "authorization_server")
}
