package openshell

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/match"
	"github.com/portcullis-dev/portcullis/policy"
)

// Source prefixes: every case names OpenShell's file and test.
const (
	opaRS       = "crates/openshell-supervisor-network/src/opa.rs: "
	pathRS      = "crates/openshell-supervisor-network/src/l7/path.rs: "
	restRS      = "crates/openshell-supervisor-network/src/l7/rest.rs: "
	jsonrpcRS   = "crates/openshell-supervisor-network/src/l7/jsonrpc.rs: "
	proxyRS     = "crates/openshell-supervisor-network/src/proxy.rs: "
	policyLocal = "crates/openshell-supervisor-network/src/policy_local.rs: "
	policyLib   = "crates/openshell-policy/src/lib.rs: "
	l7Validate  = "crates/openshell-policy/src/l7_validate.rs: "
	ambiguityRS = "crates/openshell-policy/src/ambiguity.rs: "
	proverLib   = "crates/openshell-prover/src/lib.rs: "
	e2ePy       = "e2e/python/test_policy_validation.py: "
)

// Divergences documented in DESIGN.md ("Divergences from OpenShell") and
// policy's package doc. A case that differs on purpose names one of these.
const (
	divPrivate = "private ranges need allowed_ips even for exact hostnames"
	// divUninspected: an endpoint of a protocol the proxy does not inspect
	// yet (graphql, websocket, json-rpc, sql) denies every request to its
	// destination; its document loads with a warning, so OpenShell's
	// protocol-specific document checks have nothing to protect and are
	// not applied.
	divUninspected = "uninspected protocols deny"
	// divTCPAsL4: a tcp endpoint is judged as an L4 endpoint (a connection
	// allowed as a whole, through the transparent listener or CONNECT), so
	// its document is checked as an L4 endpoint's, beyond OpenShell's rule
	// that it needs a host: an IP-literal host is accepted (a connection
	// to an address no name was answered for is judged by the address),
	// host spellings are folded as every endpoint's are, enforcement is
	// accepted and means nothing, and a tcp endpoint beside an L4 one on
	// the same host:port is no ambiguity (both allow the same connection).
	divTCPAsL4 = "a tcp endpoint is checked as an L4 endpoint"
	// divAboveRoot: `..` at the root resolves to / as RFC 3986 §5.2.4 does
	// (policy.CanonicalPath); OpenShell refuses the request.
	divAboveRoot = "dot segments never climb above / (RFC 3986)"
	// divEncodedSemicolon: an encoded `;` (%3B) in a path is data, and a
	// `.` or `..` next to it (`..%3B`) is refused, since a server that
	// decodes before stripping parameters reads it as a dot segment;
	// OpenShell decodes it and resolves `..%3B` as `..`.
	divEncodedSemicolon = "an encoded ; is data; a dot segment behind it is refused"
	// divOverlapMetadata: endpoints that can match one connection may
	// disagree on tls and allowed_ips, as OpenShell's file loader and its
	// Rego evaluation accept them (opa.rs l7_overlapping_policies_*).
	// Nothing is chosen by iteration order here: each endpoint is judged
	// with its own allowed_ips, and tls: skip never turns inspection off
	// (the proxy inspects every L7 endpoint). OpenShell's gateway loader
	// (ambiguity.rs) refuses such a document.
	divOverlapMetadata = "overlapping endpoints may disagree on tls and allowed_ips"
)

type verdict int

const (
	deny verdict = iota + 1
	allow
)

func (v verdict) String() string {
	switch v {
	case allow:
		return "allow"
	case deny:
		return "deny"
	}
	return "unset"
}

// decideCase is one OpenShell request-evaluation test: a policy, one
// request, and the verdict OpenShell's test asserts.
type decideCase struct {
	Source string // "crates/…/opa.rs: test_name"
	Policy string // OpenShell YAML; `version: 1` is added when absent (OpenShell's fixtures are Rego data)

	Binary    string
	Ancestors []string // the calling process's ancestors, nearest first
	Host      string
	Addr      string // resolved address; "" when the test gives none
	Port      int
	Method    string // HTTP method; "" for an L4 (CONNECT) decision
	Path      string
	Query     string
	MCP       *policy.MCPMessage

	OpenShell verdict // what OpenShell's test asserts

	// RawData marks a test that feeds OpenShell's Rego engine data without
	// validating it; when our validator refuses the document, that counts
	// as a denial.
	RawData bool

	// Entry, when set, is the network_policies entry OpenShell's test
	// names as the one that matched (matched_policy); Decide must name it.
	Entry string

	// Divergence names the DESIGN divergence this case follows; Ours is
	// then our verdict.
	Divergence string
	Ours       verdict
}

func (c decideCase) want() verdict {
	if c.Divergence != "" {
		return c.Ours
	}
	return c.OpenShell
}

func document(doc string) []byte {
	if !strings.Contains(doc, "version:") {
		doc = "version: 1\n" + doc
	}
	return []byte(doc)
}

// runDecide judges every case with policy.Decide and with the data
// plane's compiled matcher, which must agree on every field.
func runDecide(t *testing.T, cases []decideCase) {
	t.Helper()
	seen := map[string]int{}
	for _, c := range cases {
		name := c.Source
		seen[name]++
		if n := seen[name]; n > 1 {
			name = fmt.Sprintf("%s#%d", name, n)
		}
		t.Run(name, func(t *testing.T) {
			checkCase(t, c)
			p, _, err := policy.Parse(document(c.Policy))
			if err != nil && c.RawData && c.want() == deny {
				return
			}
			if err != nil {
				t.Fatalf("%s\nwe refuse the policy OpenShell's test loads: %v", c.Source, err)
			}
			r, ok := request(t, c)
			if !ok {
				return
			}
			m, err := match.Compile(p)
			if err != nil {
				t.Fatalf("%s\nmatch.Compile: %v", c.Source, err)
			}
			ref := policy.Decide(p, r)
			fast := m.Decide(&r)
			if !reflect.DeepEqual(ref, fast) {
				t.Errorf("%s\nmatcher and policy.Decide differ\nmatcher: %+v\ndecide:  %+v", c.Source, fast, ref)
			}
			got := deny
			if ref.Allow {
				got = allow
			}
			if got != c.want() {
				t.Errorf("%s\nOpenShell: %v; we want %v (divergence %q); we answer %v: %s %s",
					c.Source, c.OpenShell, c.want(), c.Divergence, got, ref.Rule, ref.Reason)
			}
			if c.Entry != "" && ref.Entry != c.Entry {
				t.Errorf("%s\nOpenShell's matched policy is %q; we name %q", c.Source, c.Entry, ref.Entry)
			}
		})
	}
}

func checkCase(t *testing.T, c decideCase) {
	t.Helper()
	if c.OpenShell == 0 {
		t.Fatalf("%s: case has no OpenShell verdict", c.Source)
	}
	if (c.Divergence == "") != (c.Ours == 0) {
		t.Fatalf("%s: Divergence and Ours go together", c.Source)
	}
	if c.Divergence != "" && c.Ours == c.OpenShell {
		t.Fatalf("%s: a divergence must change the verdict", c.Source)
	}
}

// request builds the policy.Request. Ancestors go into a field named
// Ancestors when policy.Request has one; without it the case fails (it is
// an OpenShell feature we lack, not a case to skip).
func request(t *testing.T, c decideCase) (policy.Request, bool) {
	r := policy.Request{
		Binary:     c.Binary,
		Host:       c.Host,
		Port:       c.Port,
		HTTPMethod: c.Method,
		Path:       c.Path,
		Query:      c.Query,
		MCP:        c.MCP,
		Time:       time.Date(2026, 8, 21, 12, 0, 0, 0, time.UTC),
	}
	if c.Addr != "" {
		r.Addr = netip.MustParseAddr(c.Addr)
	}
	if len(c.Ancestors) > 0 {
		f := reflect.ValueOf(&r).Elem().FieldByName("Ancestors")
		if !f.IsValid() || f.Type() != reflect.TypeOf([]string(nil)) {
			if c.want() == deny {
				return r, true // ancestors only ever add access: judge without them
			}
			t.Errorf("%s\nOpenShell: %v; policy.Request carries no Ancestors []string, so binary matching on ancestor processes cannot be expressed",
				c.Source, c.OpenShell)
			return r, false
		}
		f.Set(reflect.ValueOf(c.Ancestors))
	}
	return r, true
}

// call is a tools/call message on MCP 2025-11-25.
func call(tool string) *policy.MCPMessage {
	return &policy.MCPMessage{Method: "tools/call", Tool: tool, Arguments: json.RawMessage(`{}`), ProtocolVersion: "2025-11-25"}
}

// rpc is a JSON-RPC request with method m on MCP 2025-11-25.
func rpc(m string) *policy.MCPMessage {
	return &policy.MCPMessage{Method: m, ProtocolVersion: "2025-11-25"}
}

// validateCase is one OpenShell validation test: a document and whether
// OpenShell accepts it (errors) and warns.
type validateCase struct {
	Source string
	Policy string

	OpenShell verdict // allow = the document loads, deny = refused
	Contains  string  // with deny: a word our error must mention (the field or rule), "" for any
	// Warn: with allow, OpenShell loads the document with a warning about
	// this field; one of our warnings must name it.
	Warn string

	Divergence string
	Ours       verdict
}

func runValidate(t *testing.T, cases []validateCase) {
	t.Helper()
	seen := map[string]int{}
	for _, c := range cases {
		name := c.Source
		seen[name]++
		if n := seen[name]; n > 1 {
			name = fmt.Sprintf("%s#%d", name, n)
		}
		t.Run(name, func(t *testing.T) {
			if (c.Divergence == "") != (c.Ours == 0) || c.OpenShell == 0 {
				t.Fatalf("%s: malformed case", c.Source)
			}
			want := c.OpenShell
			if c.Divergence != "" {
				want = c.Ours
			}
			_, warns, err := policy.Parse(document(c.Policy))
			got := allow
			if err != nil {
				got = deny
			}
			if got != want {
				t.Errorf("%s\nOpenShell: %s; we want %s (divergence %q); we answer %s\nerror: %v\nwarnings: %v",
					c.Source, loads(c.OpenShell), loads(want), c.Divergence, loads(got), err, warns)
				return
			}
			if got == deny && c.Contains != "" && !strings.Contains(err.Error(), c.Contains) {
				t.Errorf("%s\nrefused, but the error does not mention %q: %v", c.Source, c.Contains, err)
			}
			if got == allow && c.Warn != "" {
				warned := false
				for _, w := range warns {
					warned = warned || strings.Contains(w.String(), c.Warn)
				}
				if !warned {
					t.Errorf("%s\nOpenShell warns about %q; we do not: %v", c.Source, c.Warn, warns)
				}
			}
		})
	}
}

func loads(v verdict) string {
	if v == allow {
		return "loads"
	}
	return "refused"
}

func replaceAll(s, old, new string) string { return strings.ReplaceAll(s, old, new) }
