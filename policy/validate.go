package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Limits from OpenShell's schema, and a few of our own where OpenShell sets
// none but a document could otherwise make the proxy allocate without bound.
const (
	maxFilesystemPaths   = 256
	maxFilesystemPathLen = 4096
	maxMiddlewares       = 10
	maxSelectorPatterns  = 32
	maxBodyBytesLimit    = 64 << 20
	maxNameLen           = 256
)

// knownMCPVersions are the MCP protocol revisions mcp.versions may list.
var knownMCPVersions = map[string]bool{
	"2024-11-05": true,
	"2025-03-26": true,
	"2025-06-18": true,
	"2025-11-25": true,
	"2026-07-28": true,
}

var (
	mcpVersionFmt = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
	httpToken     = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// Validate checks a policy built in Go against every rule Parse applies
// after decoding. It returns the warnings (documents that are valid but that
// Portcullis reads differently from OpenShell, or that do nothing) and, when
// the policy is invalid, a *ValidationError listing every problem. Validate
// does not modify p; the paths refer to p as given, not to its canonical
// form.
func Validate(p *Policy) (warnings []Problem, err error) {
	if p == nil {
		return nil, &ValidationError{Problems: []Problem{{Message: "policy is nil"}}}
	}
	v := &validator{}
	v.policy(p)
	if len(v.errs) > 0 {
		return v.warns, &ValidationError{Problems: v.errs}
	}
	return v.warns, nil
}

type validator struct {
	errs, warns []Problem
	// privateNoted: the private-resolution divergence was noted once.
	privateNoted bool
}

func (v *validator) errorf(path, format string, args ...any) {
	v.errs = appendProblem(v.errs, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// metadata records a problem naming a cloud metadata address.
func (v *validator) metadata(path, msg string) {
	v.errs = appendProblem(v.errs, Problem{Path: path, Message: msg, Code: CodeCloudMetadata})
}

func (v *validator) warnf(path, format string, args ...any) {
	v.warns = appendProblem(v.warns, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (v *validator) policy(p *Policy) {
	if p.Version != 1 {
		if p.Version == 0 {
			v.errorf("version", "is required and must be 1")
		} else {
			v.errorf("version", "must be 1")
		}
	}
	if p.FilesystemPolicy != nil {
		v.filesystem(p.FilesystemPolicy)
	}
	if p.Landlock != nil {
		switch p.Landlock.Compatibility {
		case "", "best_effort", "hard_requirement":
		default:
			v.errorf("landlock.compatibility", "must be best_effort or hard_requirement")
		}
	}
	if p.Process != nil {
		v.processID("process.run_as_user", p.Process.RunAsUser)
		v.processID("process.run_as_group", p.Process.RunAsGroup)
	}
	for _, name := range sortedKeys(p.NetworkPolicies) {
		v.networkPolicy(keyPath("network_policies", name), name, p.NetworkPolicies[name])
	}
	v.middlewares(p.NetworkMiddlewares)
	eps := documentEndpoints(p)
	if pairs, ok := samePortPairs(eps); ok {
		v.sharedMCPDestinations(eps, pairs)
		v.uninspectedAliases(eps, pairs)
		v.ambiguousEndpoints(eps, pairs)
	} else {
		v.errorf("network_policies", "more than %d pairs of endpoints share a port under a wildcard, hostless or repeated host (or address); too many to check against each other: split the policy", maxPortPairs)
	}
	v.middlewaresOverSkippedTLS(p.NetworkMiddlewares, eps)
}

// ambiguousEndpoints applies OpenShell's endpoint-ambiguity rule
// (openshell-policy ambiguity.rs): two endpoints whose hosts and ports
// can name one connection must agree on tls (skip or not) and on
// allowed_ips (as a set of trimmed, lower-cased strings), and, when both
// carry request metadata (an L7 protocol, allowed_ips, tls or a
// credential_binding) and their path scopes overlap with equal
// specificity, on credential_binding's provider. OpenShell refuses such a
// document because which endpoint's metadata applies would depend on
// iteration order; Portcullis refuses it too, at the later endpoint's
// field. (OpenShell's other request-metadata conflicts — protocol,
// enforcement, signing, body limits — are not applied here.)
func (v *validator) ambiguousEndpoints(eps []pathedEndpoint, pairs [][2]int) {
	for _, ij := range pairs {
		a, b := eps[ij[0]], eps[ij[1]]
		if !hostsOverlap(a.ep.Host, b.ep.Host) {
			continue
		}
		where := fmt.Sprintf("%s (%s) on port %d", a.path, endpointSelector(a.ep), sharedPort(a.ep, b.ep))
		if ta, tb := a.ep.TLS == "skip", b.ep.TLS == "skip"; ta != tb {
			v.errorf(keyPath(b.path, "tls"), "is %s here but %s at %s: endpoints that can match one connection must agree on tls (OpenShell refuses the document too)",
				tlsWord(tb), tlsWord(ta), where)
		}
		if ia, ib := normalizedIPs(a.ep.AllowedIPs), normalizedIPs(b.ep.AllowedIPs); !slices.Equal(ia, ib) {
			v.errorf(keyPath(b.path, "allowed_ips"), "%v differs from the allowed_ips %v of %s: endpoints that can match one connection must agree on allowed_ips (OpenShell refuses the document too)",
				ib, ia, where)
		}
		if requestMetadata(a.ep) && requestMetadata(b.ep) && pathScopesOverlap(a.ep.Path, b.ep.Path) &&
			pathSpecificity(a.ep.Path) == pathSpecificity(b.ep.Path) {
			if pa, pb := bindingProvider(a.ep), bindingProvider(b.ep); pa != pb {
				v.errorf(keyPath(b.path, "credential_binding"), "provider %q differs from provider %q of %s: endpoints that can match one request must agree on credential_binding (OpenShell refuses the document too)",
					pb, pa, where)
			}
		}
	}
}

// maxPortPairs bounds the pairs of endpoints the checks across endpoints
// compare. A document of distinct exact hosts has none; a sandbox can
// still send a 4 MB document of wildcard endpoints on one port through
// ProverService.Prove, and comparing every pair of those would take
// minutes. Beyond the bound the document is refused.
const maxPortPairs = 1 << 20

// samePortPairs lists, in document order (i < j), the pairs of endpoints
// that share a port and whose hosts might name one host or one address:
// the same exact host or address (addressKey), or either host a wildcard
// or absent (hostless). Two exact hosts with different keys never meet,
// so they are never paired, and a document of many distinct hosts costs
// what its length does. ok is false when there are more than maxPortPairs
// pairs. The checks across endpoints still judge each pair exactly.
func samePortPairs(eps []pathedEndpoint) (pairs [][2]int, ok bool) {
	type bucket struct {
		exact map[string][]int // exact host → endpoints
		loose []int            // wildcard or hostless endpoints
		all   []int
	}
	byPort := map[int]*bucket{}
	for i, e := range eps {
		for _, port := range EndpointPorts(e.ep) {
			b := byPort[port]
			if b == nil {
				b = &bucket{exact: map[string][]int{}}
				byPort[port] = b
			}
			if e.ep.Host == "" || strings.Contains(e.ep.Host, "*") {
				b.loose = append(b.loose, i)
			} else {
				h := addressKey(e.ep.Host)
				b.exact[h] = append(b.exact[h], i)
			}
			b.all = append(b.all, i)
		}
	}
	seen := map[[2]int]bool{}
	add := func(i, j int) bool {
		if i == j {
			return true
		}
		if i > j {
			i, j = j, i
		}
		if !seen[[2]int{i, j}] {
			if len(pairs) == maxPortPairs {
				return false
			}
			seen[[2]int{i, j}] = true
			pairs = append(pairs, [2]int{i, j})
		}
		return true
	}
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		b := byPort[port]
		for _, same := range b.exact {
			for x, i := range same {
				for _, j := range same[x+1:] {
					if !add(i, j) {
						return nil, false
					}
				}
			}
		}
		for _, i := range b.loose {
			for _, j := range b.all {
				if !add(i, j) {
					return nil, false
				}
			}
		}
	}
	slices.SortFunc(pairs, func(p, q [2]int) int {
		if p[0] != q[0] {
			return p[0] - q[0]
		}
		return p[1] - q[1]
	})
	return pairs, true
}

// addressKey is one spelling for exact hosts that may denote one address
// (hostsMeet): an IP literal in any spelling as its address, every
// loopback name and address as one key, other names as canonicalHost.
func addressKey(h string) string {
	if IsLoopbackName(h) {
		return "loopback"
	}
	if ip, ok := ParseHostIP(h); ok {
		if ip.IsLoopback() {
			return "loopback"
		}
		return ip.String()
	}
	return canonicalHost(h)
}

func endpointSelector(ep *Endpoint) string {
	host := canonicalHost(ep.Host)
	if host == "" {
		host = "<any host>"
	}
	return host + ep.Path
}

func tlsWord(skip bool) string {
	if skip {
		return "skip"
	}
	return "automatic"
}

// normalizedIPs is OpenShell's reading of allowed_ips for the ambiguity
// rule: a sorted set of trimmed, lower-cased strings.
func normalizedIPs(ips []string) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, strings.ToLower(strings.TrimSpace(ip)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// requestMetadata is OpenShell's endpoint_contributes_request_pipeline_metadata.
func requestMetadata(ep *Endpoint) bool {
	return isL7(ep.Protocol) || len(ep.AllowedIPs) > 0 || ep.TLS != "" || ep.CredentialBinding != nil
}

func bindingProvider(ep *Endpoint) string {
	if ep.CredentialBinding == nil {
		return ""
	}
	return ep.CredentialBinding.Provider
}

// pathSpecificity is OpenShell's path_selector_specificity: the number of
// characters of the path scope other than `*`.
func pathSpecificity(p string) int {
	return len(strings.ReplaceAll(p, "*", ""))
}

// pathScopesOverlap reports whether two endpoint path scopes may match one
// path: an empty or `/**` scope matches every path; two literal scopes
// overlap when equal, a literal and a glob when the glob matches the
// literal; two globs overlap unless their literal heads (before the first
// metacharacter) diverge — a superset of OpenShell's exact answer, so
// every conflict OpenShell refuses is refused here too.
func pathScopesOverlap(a, b string) bool {
	all := func(p string) bool { return p == "" || p == "**" || p == "/**" }
	if all(a) || all(b) {
		return true
	}
	ga, gb := hasGlobMeta(a) || strings.Contains(a, "\\"), hasGlobMeta(b) || strings.Contains(b, "\\")
	switch {
	case !ga && !gb:
		return a == b
	case ga && !gb:
		return MatchGlob(a, b) || MatchDenyGlob(a, b)
	case !ga && gb:
		return MatchGlob(b, a) || MatchDenyGlob(b, a)
	}
	// Every path a glob matches starts with its literal head.
	ha, hb := a[:strings.IndexAny(a, "*?[\\")], b[:strings.IndexAny(b, "*?[\\")]
	return strings.HasPrefix(ha, hb) || strings.HasPrefix(hb, ha)
}

// pathedEndpoint is an endpoint with its field path, for checks that span
// entries.
type pathedEndpoint struct {
	path string
	ep   *Endpoint
}

// documentEndpoints lists every endpoint, entries in key order. A hostless
// (allowed_ips) endpoint is listed too: it matches every host whose
// address its allowed_ips cover, so it shares a host:port with any named
// endpoint on its ports.
func documentEndpoints(p *Policy) []pathedEndpoint {
	var out []pathedEndpoint
	for _, name := range sortedKeys(p.NetworkPolicies) {
		np := p.NetworkPolicies[name]
		if np == nil {
			continue
		}
		for i, ep := range np.Endpoints {
			if ep != nil {
				out = append(out, pathedEndpoint{indexPath(keyPath(keyPath("network_policies", name), "endpoints"), i), ep})
			}
		}
	}
	return out
}

// hostsOverlap reports whether two host patterns can name one host
// (HostPatternsOverlap, exact for every wildcard ValidHostPattern admits).
// A hostless endpoint ("") may match any host.
func hostsOverlap(a, b string) bool {
	return a == "" || b == "" || canonicalHost(a) == canonicalHost(b) || HostPatternsOverlap(a, b)
}

// sameAddress reports whether two hosts, spelt differently, denote one
// address: IP literals in any spelling ParseHostIP reads (::ffff:a.b.c.d
// is a.b.c.d), and loopback names (localhost, *.localhost) with each other
// and with every loopback address. A DNS name may resolve anywhere; that
// is checked when the proxy connects.
func sameAddress(a, b string) bool {
	ia, okA := ParseHostIP(a)
	ib, okB := ParseHostIP(b)
	if okA && okB && ia == ib {
		return true
	}
	loopA, loopB := IsLoopbackName(a) || okA && ia.IsLoopback(), IsLoopbackName(b) || okB && ib.IsLoopback()
	return loopA && loopB && (IsLoopbackName(a) || IsLoopbackName(b))
}

// hostsMeet reports whether two host patterns can name one host, or one
// address under two spellings.
func hostsMeet(a, b string) bool { return hostsOverlap(a, b) || sameAddress(a, b) }

// sharedMCPDestinations applies OpenShell's rule that an MCP endpoint
// cannot share its host:port with a differently inspected endpoint (which
// would judge the same requests without the MCP rules — a REST `/**` with
// access: full would pass every tools/call), and that MCP endpoints on one
// host:port agree on strict_tool_names, allow_all_known_mcp_methods and
// max_body_bytes.
func (v *validator) sharedMCPDestinations(eps []pathedEndpoint, pairs [][2]int) {
	for _, ij := range pairs {
		a, b := eps[ij[0]], eps[ij[1]]
		if a.ep.Protocol != ProtocolMCP && b.ep.Protocol != ProtocolMCP || !hostsMeet(a.ep.Host, b.ep.Host) {
			continue
		}
		m, o := a, b
		if m.ep.Protocol != ProtocolMCP {
			m, o = b, a
		}
		dest := fmt.Sprintf("%s:%d", canonicalHost(m.ep.Host), sharedPort(m.ep, o.ep))
		switch {
		case o.ep.Protocol != ProtocolMCP:
			proto := o.ep.Protocol
			if proto == ProtocolL4 {
				proto = "none (L4)"
			}
			v.errorf(m.path, "shares %s with %s (protocol %s); an mcp endpoint cannot share its host:port with a differently inspected endpoint", dest, o.path, proto)
		case mcpProfile(m.ep) != mcpProfile(o.ep):
			v.errorf(m.path, "shares %s with %s; mcp endpoints on one host:port must agree on strict_tool_names, allow_all_known_mcp_methods and max_body_bytes", dest, o.path)
		}
	}
}

// uninspectedAliases refuses an L4 endpoint whose host is another spelling
// of the address of an endpoint inspected at L7 on the same port
// (`localhost` and `127.0.0.1`): the proxy inspects by the host a request
// names, so a tunnel to the L4 spelling would reach the inspected server
// with none of its rules. Hosts that match each other are no alias: every
// request to them is inspected. (MCP endpoints are refused by
// sharedMCPDestinations, which compares addresses the same way.)
func (v *validator) uninspectedAliases(eps []pathedEndpoint, pairs [][2]int) {
	plainL4 := func(e pathedEndpoint) bool { return e.ep.Protocol == ProtocolL4 && len(e.ep.DenyRules) == 0 }
	reported := map[int]bool{}
	for _, ij := range pairs {
		for _, lo := range [][2]int{ij, {ij[1], ij[0]}} {
			l4, o := eps[lo[0]], eps[lo[1]]
			if reported[lo[0]] || !plainL4(l4) || plainL4(o) || o.ep.Protocol == ProtocolMCP ||
				hostsOverlap(l4.ep.Host, o.ep.Host) || !sameAddress(l4.ep.Host, o.ep.Host) {
				continue
			}
			reported[lo[0]] = true
			v.errorf(keyPath(l4.path, "host"), "%s is the address of %s (%s, protocol %s) on port %d; an L4 endpoint cannot reach an inspected endpoint under another spelling of its address — use the same host, or inspect this one too",
				canonicalHost(l4.ep.Host), canonicalHost(o.ep.Host), o.path, o.ep.Protocol, sharedPort(l4.ep, o.ep))
		}
	}
}

func sharedPort(a, b *Endpoint) int {
	for _, p := range EndpointPorts(a) {
		if slices.Contains(EndpointPorts(b), p) {
			return p
		}
	}
	return 0
}

// mcpProfile is the part of an MCP endpoint's options that endpoints on
// one host:port must share, with defaults filled.
func mcpProfile(ep *Endpoint) [3]any {
	body := DefaultMaxBodyBytes
	if ep.MCP != nil && ep.MCP.MaxBodyBytes != 0 {
		body = ep.MCP.MaxBodyBytes
	}
	return [3]any{strictNames(ep), allowAllKnown(ep), body}
}

// middlewaresOverSkippedTLS refuses, as OpenShell does, a fail_closed
// middleware whose selector can cover a `tls: skip` endpoint: the proxy
// cannot run it on traffic it does not decrypt, so the stage could never
// do what fail_closed promises.
func (v *validator) middlewaresOverSkippedTLS(ms map[string]*Middleware, eps []pathedEndpoint) {
	for _, key := range sortedKeys(ms) {
		m := ms[key]
		if m == nil || m.OnError == "fail_open" {
			continue
		}
		for i, inc := range m.Endpoints.Include {
			for _, e := range eps {
				if e.ep.TLS != "skip" || !hostsOverlap(inc, e.ep.Host) || excluded(m.Endpoints.Exclude, e.ep.Host) {
					continue
				}
				v.errorf(indexPath(keyPath(keyPath(keyPath("network_middlewares", key), "endpoints"), "include"), i),
					"can select %s (%s), which has tls: skip and cannot be inspected; a fail_closed middleware must not cover it (exclude it or use on_error: fail_open)", canonicalHost(e.ep.Host), e.path)
				break
			}
		}
	}
}

// excluded reports whether an exclude list covers every host an endpoint
// host pattern names.
func excluded(exclude []string, host string) bool {
	for _, x := range exclude {
		if canonicalHost(x) == canonicalHost(host) || !strings.Contains(host, "*") && MatchHost(x, host) {
			return true
		}
	}
	return false
}

func (v *validator) filesystem(fs *FilesystemPolicy) {
	if n := len(fs.ReadOnly) + len(fs.ReadWrite); n > maxFilesystemPaths {
		v.errorf("filesystem_policy", "lists %d paths; at most %d are allowed", n, maxFilesystemPaths)
	}
	check := func(field string, paths []string, rw bool) {
		for i, p := range paths {
			fp := indexPath("filesystem_policy."+field, i)
			switch {
			case len(p) > maxFilesystemPathLen:
				v.errorf(fp, "is longer than %d characters", maxFilesystemPathLen)
			case !strings.HasPrefix(p, "/"):
				v.errorf(fp, "must be an absolute path")
			case hasDotDot(p):
				v.errorf(fp, "must not contain .. components")
			case strings.ContainsRune(p, 0):
				v.errorf(fp, "must not contain NUL")
			case rw && path.Clean(p) == "/":
				v.errorf(fp, "read_write must not be / (too broad)")
			}
		}
	}
	check("read_only", fs.ReadOnly, false)
	check("read_write", fs.ReadWrite, true)
}

func hasDotDot(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}

// processID checks run_as_user / run_as_group: "sandbox" or a numeric id in
// 1..4294967294 (0 is root; 4294967295 is (uid_t)-1, "no change").
func (v *validator) processID(path, id string) {
	if id == "" || id == "sandbox" {
		return
	}
	n, err := strconv.ParseUint(id, 10, 64)
	switch {
	case id == "root" || (err == nil && n == 0):
		v.errorf(path, "must not be root")
	case err != nil:
		v.errorf(path, "must be sandbox or a numeric id in 1..4294967294")
	case n > 4294967294:
		v.errorf(path, "must be a numeric id in 1..4294967294")
	}
}

func (v *validator) networkPolicy(path, key string, np *NetworkPolicy) {
	if key == "" {
		v.errorf(path, "name must not be empty")
	}
	if np == nil {
		v.errorf(path, "must be a mapping with endpoints and binaries")
		return
	}
	if len(key) > maxNameLen || len(np.Name) > maxNameLen {
		v.errorf(path, "name is longer than %d characters", maxNameLen)
	}
	if len(np.Endpoints) == 0 {
		v.warnf(keyPath(path, "endpoints"), "no endpoints: this entry allows nothing")
	}
	for i, ep := range np.Endpoints {
		ep1 := indexPath(keyPath(path, "endpoints"), i)
		if ep == nil {
			v.errorf(ep1, "must be an endpoint mapping")
			continue
		}
		v.endpoint(ep1, ep)
	}
	if len(np.Binaries) == 0 {
		v.warnf(keyPath(path, "binaries"), "no binaries: any program in the sandbox may use these endpoints")
	}
	for i, b := range np.Binaries {
		v.binary(indexPath(keyPath(path, "binaries"), i), b)
	}
}

func (v *validator) binary(path string, b Binary) {
	p := keyPath(path, "path")
	switch {
	case b.Path == "":
		v.errorf(p, "is required")
		return
	case !strings.HasPrefix(b.Path, "/") && !strings.HasPrefix(b.Path, "*"):
		v.errorf(p, "must be an absolute path or a glob")
		return
	case hasDotDot(b.Path):
		v.errorf(p, "must not contain .. components")
		return
	}
	if err := ValidGlob(b.Path); err != nil {
		v.errorf(p, "%v", err)
		return
	}
	v.singleStar(p, b.Path)
	if b.Harness != nil {
		v.warnf(keyPath(path, "harness"), "is deprecated and ignored")
	}
}

// singleStar warns about a glob whose lone `*` OpenShell would let match
// across `/`; in Portcullis it stays within one segment.
func (v *validator) singleStar(path, glob string) {
	for i := 0; i < len(glob); i++ {
		switch glob[i] {
		case '\\':
			i++
		case '*':
			if i+1 < len(glob) && glob[i+1] == '*' {
				i++
				continue
			}
			v.warnf(path, "%q: `*` matches within one path segment in Portcullis (OpenShell lets it cross `/`); use `**` to match across segments", glob)
			return
		}
	}
}

// pathSpelling warns about path globs that read differently from how
// they look: a raw `;` never matches (CanonicalPath strips `;`
// parameters, as OpenShell does), and an encoded one is `%3B` here (data,
// which OpenShell strips after decoding); a deny glob with upper-case
// letters also denies every other case (MatchDenyPath; OpenShell compares
// exactly).
func (v *validator) pathSpelling(path, glob string, allow bool) {
	if strings.Contains(glob, ";") {
		v.warnf(path, "%q: paths are matched with `;` parameters stripped, so a `;` in a glob never matches (an encoded semicolon in a path is %%3B)", glob)
	}
	if strings.Contains(strings.ToUpper(glob), "%3B") {
		v.warnf(path, "%q: Portcullis keeps an encoded `;` (%%3B) in a path as data; OpenShell decodes it and strips what follows, so this glob matches nothing there", glob)
	}
	if !allow && strings.ToLower(glob) != glob {
		v.warnf(path, "%q: deny rules match paths ignoring case in Portcullis (OpenShell compares exactly), so this also denies %q", glob, strings.ToLower(glob))
	}
}

// allowBraces warns about `{a,b}` in an allow path glob (or an
// endpoint's path scope): OpenShell reads them as alternatives, Portcullis
// reads allow globs literally (a canonical path spells `{` as %7B, so the
// glob allows nothing there), failing closed. Deny path globs expand them
// (MatchDenyPath).
func (v *validator) allowBraces(path, glob string) {
	if HasBraceAlternatives(glob) {
		v.warnf(path, "%q: Portcullis reads `{a,b}` literally in allow path globs (OpenShell reads alternatives), so this matches no request path; write one rule per alternative", glob)
	}
}

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
	case ProtocolGraphQL, ProtocolWebSocket, ProtocolJSONRPC, ProtocolSQL, ProtocolTCP:
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
		v.warnf(hp, "if this host resolves to a private address, Portcullis denies it unless allowed_ips covers it (OpenShell allows private resolution for exact hostnames); the same holds for every exact hostname without allowed_ips")
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

// rule checks one allow (allow=true) or deny rule against its endpoint's
// protocol.
func (v *validator) rule(path string, ep *Endpoint, r *L7Rule, allow bool) {
	proto := ep.Protocol
	notValid := func(field string, set bool) {
		if set {
			v.errorf(keyPath(path, field), "is not valid on protocol %s", proto)
		}
	}
	httpFields := func() {
		notValid("command", r.Command != "")
		notValid("tool", r.Tool != nil)
		notValid("params", r.Params != nil)
		notValid("arguments_schema", r.ArgumentsSchema != nil)
	}
	graphQLFields := func(required bool) {
		switch r.OperationType {
		case "query", "mutation", "subscription", "*":
		case "":
			if required {
				v.errorf(keyPath(path, "operation_type"), "is required")
			}
		default:
			v.errorf(keyPath(path, "operation_type"), "must be query, mutation, subscription or *")
		}
		if r.OperationName != "" {
			if err := ValidGlob(r.OperationName); err != nil {
				v.errorf(keyPath(path, "operation_name"), "%v", err)
			}
		}
		if r.Fields != nil && len(r.Fields) == 0 {
			v.errorf(keyPath(path, "fields"), "must not be empty (omit it to match every field)")
		}
		for i, f := range r.Fields {
			if err := ValidGlob(f); err != nil {
				v.errorf(indexPath(keyPath(path, "fields"), i), "%v", err)
			}
		}
	}
	switch proto {
	case ProtocolREST:
		v.httpRule(path, r, false, allow)
		httpFields()
		notValid("operation_type", r.OperationType != "")
		notValid("operation_name", r.OperationName != "")
		notValid("fields", r.Fields != nil)
	case ProtocolWebSocket:
		isGraphQL := r.OperationType != "" || r.OperationName != "" || r.Fields != nil
		if isGraphQL {
			if r.Method != "" || r.Path != "" || r.Query != nil {
				v.errorf(path, "do not combine method, path or query with GraphQL operation fields in one rule")
			}
			graphQLFields(true)
		} else {
			v.httpRule(path, r, true, allow)
		}
		httpFields()
	case ProtocolGraphQL:
		graphQLFields(true)
		httpFields()
		notValid("method", r.Method != "")
		notValid("path", r.Path != "")
		notValid("query", r.Query != nil)
	case ProtocolSQL:
		if r.Command == "" {
			v.errorf(keyPath(path, "command"), "is required on protocol sql")
		}
		notValid("method", r.Method != "")
		notValid("path", r.Path != "")
		notValid("query", r.Query != nil)
		notValid("tool", r.Tool != nil)
		notValid("params", r.Params != nil)
		notValid("arguments_schema", r.ArgumentsSchema != nil)
		notValid("operation_type", r.OperationType != "")
		notValid("operation_name", r.OperationName != "")
		notValid("fields", r.Fields != nil)
	case ProtocolJSONRPC:
		switch {
		case r.Method == "":
			v.errorf(keyPath(path, "method"), "is required on protocol json-rpc")
		case r.Method != "*" && hasGlobMeta(r.Method):
			v.errorf(keyPath(path, "method"), "must be an exact method name or * on protocol json-rpc")
		}
		httpFields()
		notValid("path", r.Path != "")
		notValid("query", r.Query != nil)
		notValid("operation_type", r.OperationType != "")
		notValid("operation_name", r.OperationName != "")
		notValid("fields", r.Fields != nil)
	case ProtocolMCP:
		v.mcpRule(path, ep, r, allow)
	}
	if r.ExpiresAt != nil && !allow {
		v.errorf(keyPath(path, "expires_at"), "is only valid on allow rules")
	}
	if r.ExpiresAt != nil && r.ExpiresAt.IsZero() {
		v.errorf(keyPath(path, "expires_at"), "must be a time")
	}
}

// httpRule checks method, path and query of a REST or WebSocket rule.
// Only allow rules get the single-`*` warning: deny globs are read the
// wider, OpenShell way too (see MatchDenyGlob).
func (v *validator) httpRule(path string, r *L7Rule, websocket, allow bool) {
	mp := keyPath(path, "method")
	switch {
	case r.Method == "":
		v.errorf(mp, "is required")
	case websocket:
		switch strings.ToUpper(r.Method) {
		case "GET", "WEBSOCKET_TEXT", "*":
		default:
			v.errorf(mp, "must be GET, WEBSOCKET_TEXT or * on protocol websocket")
		}
	case r.Method != "*" && !httpToken.MatchString(r.Method):
		v.errorf(mp, "must be an HTTP method or *")
	}
	pp := keyPath(path, "path")
	switch {
	case r.Path == "":
		v.errorf(pp, "is required")
	case !strings.HasPrefix(r.Path, "/") && !strings.HasPrefix(r.Path, "*"):
		v.errorf(pp, "must start with /")
	default:
		if allow {
			if err := ValidGlob(r.Path); err != nil {
				v.errorf(pp, "%v", err)
			} else {
				v.singleStar(pp, r.Path)
				v.allowBraces(pp, r.Path)
			}
		} else if err := ValidDenyPathGlob(r.Path); err != nil {
			v.errorf(pp, "%v", err)
		}
		v.pathSpelling(pp, r.Path, allow)
	}
	for _, k := range sortedKeys(r.Query) {
		qp := keyPath(keyPath(path, "query"), k)
		if k == "" {
			v.errorf(qp, "query parameter name must not be empty")
		}
		v.queryMatcher(qp, r.Query[k], allow)
	}
}

func (v *validator) matcher(path string, m *Matcher) {
	if m == nil || len(m.Any) == 0 {
		v.errorf(path, "must name at least one glob")
		return
	}
	for i, g := range m.Any {
		p := path
		if len(m.Any) > 1 {
			p = indexPath(keyPath(path, "any"), i)
		}
		if err := ValidGlob(g); err != nil {
			v.errorf(p, "%v", err)
		}
	}
}

// queryMatcher checks a query parameter matcher. As in OpenShell, a glob
// that does not parse (an unclosed `[`, a trailing backslash) is a
// warning, not an error; it fails closed: in an allow rule it matches no
// value, in a deny rule every value (OpenShell's Rego, where the failed
// match is undefined, would let the deny rule lapse).
func (v *validator) queryMatcher(path string, m *Matcher, allow bool) {
	if m == nil || len(m.Any) == 0 {
		v.errorf(path, "must name at least one glob")
		return
	}
	effect := "it matches every value, so this deny rule applies whenever the parameter is present"
	if allow {
		effect = "it matches no value, so this rule allows no request carrying the parameter"
	}
	for i, g := range m.Any {
		p := path
		if len(m.Any) > 1 {
			p = indexPath(keyPath(path, "any"), i)
		}
		if err := ValidQueryGlob(g); err != nil {
			v.warnf(p, "%v: %s", err, effect)
		}
	}
}

// ruleTool returns the tool matcher of an MCP rule, whichever spelling
// (tool or params.name) it uses.
func ruleTool(r *L7Rule) *Matcher {
	if r.Tool != nil {
		return r.Tool
	}
	if r.Params != nil {
		return r.Params["name"]
	}
	return nil
}

func (v *validator) mcpRule(path string, ep *Endpoint, r *L7Rule, allow bool) {
	allowAll, strict := allowAllKnown(ep), strictNames(ep)
	mp := keyPath(path, "method")
	switch {
	case r.Method == "":
		if !allowAll {
			v.errorf(mp, "is required unless mcp.allow_all_known_mcp_methods is true")
		}
	case r.Method == "*":
		v.errorf(mp, "must not be * on protocol mcp; omit it with mcp.allow_all_known_mcp_methods: true")
	case hasGlobMeta(r.Method):
		if !strings.HasPrefix(r.Method, "tools/") {
			v.errorf(mp, "globs are allowed only in the tools/ method family (such as tools/*)")
		} else if err := ValidGlob(r.Method); err != nil {
			v.errorf(mp, "%v", err)
		}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"path", r.Path != ""}, {"query", r.Query != nil}, {"command", r.Command != ""},
		{"operation_type", r.OperationType != ""}, {"operation_name", r.OperationName != ""}, {"fields", r.Fields != nil},
	} {
		if f.set {
			v.errorf(keyPath(path, f.name), "is not valid on protocol mcp")
		}
	}
	for _, k := range sortedKeys(r.Params) {
		if k != "name" {
			v.errorf(keyPath(keyPath(path, "params"), k), "MCP rules accept only params.name (tool arguments are matched with arguments_schema)")
		}
	}
	if r.Tool != nil && r.Params != nil && r.Params["name"] != nil {
		v.errorf(keyPath(path, "params"), "tool and params.name are two spellings of one matcher; set only one")
	}
	toolPath := keyPath(path, "tool")
	if r.Tool == nil && r.Params != nil {
		toolPath = keyPath(keyPath(path, "params"), "name")
	}
	tool := ruleTool(r)
	if tool != nil || len(r.Params) > 0 {
		methodOK := r.Method == "tools/call" || (allowAll && r.Method == "")
		if !methodOK {
			v.errorf(toolPath, "needs method: tools/call")
		}
	}
	if tool != nil {
		v.matcher(toolPath, tool)
		for _, g := range tool.Any {
			if hasGlobMeta(g) {
				if !strict {
					v.errorf(toolPath, "tool globs need mcp.strict_tool_names: true")
				}
			} else if strict && !ValidToolName(g) {
				v.errorf(toolPath, "tool name %q does not match ^[A-Za-z0-9_.-]{1,128}$ (required by mcp.strict_tool_names)", g)
			}
		}
	}
	if r.ArgumentsSchema != nil {
		sp := keyPath(path, "arguments_schema")
		switch {
		case !allow:
			v.errorf(sp, "is only valid on allow rules")
		case !(r.Method == "tools/call" || (allowAll && r.Method == "" && tool != nil)):
			v.errorf(sp, "needs method: tools/call")
		case tool == nil || len(sortedUnique(tool.Any)) != 1 || hasGlobMeta(tool.Any[0]):
			v.errorf(sp, "needs the rule to name exactly one tool, without globs")
		default:
			v.argumentsSchema(sp, r.ArgumentsSchema)
		}
	}
}

// argumentsSchema checks an arguments_schema: it must compile; each format
// keyword is reported where it stands — an error when the format cannot be
// asserted, else a warning that it is asserted (JSON Schema 2020-12 only
// annotates format unless told otherwise).
func (v *validator) argumentsSchema(path string, schema map[string]any) {
	schemaFormats(schema, path, func(p, name string) {
		if assertedFormats[name] {
			v.warnf(p, "format %q is asserted: a string that is not a valid %s is refused (JSON Schema 2020-12 only annotates format by default)", name, name)
		} else {
			v.errorf(p, "format %q cannot be checked (known: %s); Portcullis asserts formats, so a format it cannot check would refuse nothing", name, strings.Join(KnownFormats(), ", "))
		}
	})
	var unknown *UnknownFormatError
	if _, err := CompileArgumentsSchema(schema); err != nil && !errors.As(err, &unknown) {
		v.errorf(path, "invalid JSON Schema: %v", err)
	}
}

// matchesToolsCall reports whether an MCP rule's method selects tools/call.
func matchesToolsCall(method string, allowAll bool) bool {
	if method == "" {
		return allowAll
	}
	if method == "tools/call" {
		return true
	}
	return hasGlobMeta(method) && MatchGlob(method, "tools/call")
}

// mcpToolMixing refuses a broad tools/call rule next to tool-specific allow
// rules: the broad rule would bypass (allow) or erase (deny) the tool filter.
func (v *validator) mcpToolMixing(path string, ep *Endpoint, allowAll bool) {
	specific := false
	for _, r := range ep.Rules {
		if r.Allow != nil && ruleTool(r.Allow) != nil {
			specific = true
		}
	}
	if !specific {
		return
	}
	broad := func(p string, r *L7Rule) {
		if r != nil && ruleTool(r) == nil && matchesToolsCall(r.Method, allowAll) {
			v.errorf(p, "a rule matching every tools/call cannot be combined with tool-specific allow rules; add tool, or remove the tool-specific rules")
		}
	}
	for i, r := range ep.Rules {
		broad(keyPath(indexPath(keyPath(path, "rules"), i), "allow"), r.Allow)
	}
	for i, r := range ep.DenyRules {
		broad(indexPath(keyPath(path, "deny_rules"), i), r)
	}
}

// CompileArgumentsSchema compiles an arguments_schema as JSON Schema (draft
// 2020-12 unless it says otherwise), with format asserted (see
// ValidateArguments). It never loads anything: a $ref to a file or URL is
// an error, so validating a policy cannot read the gateway's disk or reach
// the network. A schema number beyond the argument number limits is an
// error, and so (an *UnknownFormatError) is a format that cannot be
// asserted. The validator, Decide and the proxy's matcher all compile
// through it, so each sees the schema the validator accepted.
func CompileArgumentsSchema(schema map[string]any) (*jsonschema.Schema, error) {
	if err := checkJSONValue(schema, 0); err != nil {
		return nil, err
	}
	data, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	if err := compileArgumentsDoc(doc); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	const url = "urn:portcullis:arguments_schema"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %s is not allowed", url)
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

func (v *validator) protocolOptions(path string, ep *Endpoint) {
	proto := ep.Protocol
	if ep.MCP != nil {
		mp := keyPath(path, "mcp")
		if proto != ProtocolMCP {
			v.errorf(mp, "is only valid on protocol mcp")
		} else {
			v.bodyLimit(keyPath(mp, "max_body_bytes"), ep.MCP.MaxBodyBytes)
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
		if proto != ProtocolJSONRPC {
			v.errorf(jp, "is only valid on protocol json-rpc")
		} else {
			v.bodyLimit(keyPath(jp, "max_body_bytes"), ep.JSONRPC.MaxBodyBytes)
		}
	}
	graphQL := proto == ProtocolGraphQL || proto == ProtocolWebSocket
	if ep.GraphQLMaxBodyBytes != 0 {
		gp := keyPath(path, "graphql_max_body_bytes")
		if !graphQL {
			v.errorf(gp, "is only valid on protocol graphql or websocket")
		} else {
			v.bodyLimit(gp, ep.GraphQLMaxBodyBytes)
		}
	}
	pq := keyPath(path, "persisted_queries")
	switch ep.PersistedQueries {
	case "":
	case "deny", "allow_registered":
		if !graphQL {
			v.errorf(pq, "is only valid on protocol graphql or websocket")
		}
		if ep.PersistedQueries == "allow_registered" && len(ep.GraphQLPersistedQueries) == 0 {
			v.errorf(pq, "allow_registered needs graphql_persisted_queries")
		}
	default:
		v.errorf(pq, "must be deny or allow_registered")
	}
	if ep.GraphQLPersistedQueries != nil {
		gq := keyPath(path, "graphql_persisted_queries")
		if !graphQL {
			v.errorf(gq, "is only valid on protocol graphql or websocket")
		}
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

func (v *validator) middlewares(ms map[string]*Middleware) {
	if len(ms) > maxMiddlewares {
		v.errorf("network_middlewares", "has %d entries; at most %d are allowed", len(ms), maxMiddlewares)
	}
	orders := map[int]string{}
	for _, key := range sortedKeys(ms) {
		path := keyPath("network_middlewares", key)
		m := ms[key]
		if m == nil {
			v.errorf(path, "must be a mapping")
			continue
		}
		if m.Middleware == "" {
			v.errorf(keyPath(path, "middleware"), "is required")
		}
		if other, dup := orders[m.Order]; dup {
			v.errorf(keyPath(path, "order"), "%d is also the order of %s; orders must be unique", m.Order, other)
		} else {
			orders[m.Order] = key
		}
		switch m.OnError {
		case "", "fail_closed", "fail_open":
		default:
			v.errorf(keyPath(path, "on_error"), "must be fail_closed or fail_open")
		}
		if err := checkJSONValue(m.Config, 0); err != nil {
			v.errorf(keyPath(path, "config"), "%v", err)
		}
		ep := keyPath(path, "endpoints")
		if len(m.Endpoints.Include) == 0 {
			v.errorf(keyPath(ep, "include"), "must name at least one host pattern")
		}
		if n := len(m.Endpoints.Include) + len(m.Endpoints.Exclude); n > maxSelectorPatterns {
			v.errorf(ep, "has %d patterns; at most %d are allowed", n, maxSelectorPatterns)
		}
		for _, list := range []struct {
			name     string
			patterns []string
		}{{"include", m.Endpoints.Include}, {"exclude", m.Endpoints.Exclude}} {
			for i, pat := range list.patterns {
				if err := ValidHostPattern(pat); err != nil {
					v.errorf(indexPath(keyPath(ep, list.name), i), "%v", err)
				}
			}
		}
	}
}

// checkJSONValue reports a free-form value (built in Go) that has no JSON
// form or nests too deeply.
func checkJSONValue(x any, depth int) error {
	if depth > maxNesting {
		return fmt.Errorf("nested more than %d levels deep", maxNesting)
	}
	switch t := x.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, json.Number:
		return nil
	case float32:
		return checkJSONValue(float64(t), depth)
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return errors.New("numbers must be finite")
		}
		return nil
	case map[string]any:
		for _, k := range sortedKeys(t) {
			if err := checkJSONValue(t[k], depth+1); err != nil {
				return err
			}
		}
		return nil
	case []any:
		for _, e := range t {
			if err := checkJSONValue(e, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	rv := reflect.ValueOf(x)
	switch rv.Kind() {
	case reflect.Func, reflect.Chan, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer:
		return fmt.Errorf("value of type %T has no JSON form", x)
	}
	if _, err := json.Marshal(x); err != nil {
		return fmt.Errorf("value of type %T has no JSON form: %v", x, err)
	}
	return nil
}
