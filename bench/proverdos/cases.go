package main

import (
	"fmt"
	"strings"
)

// basePolicy is the sandbox's policy: a REST API and an MCP server.
const basePolicy = `version: 1
network_policies:
  api:
    binaries: [ { path: /usr/bin/curl } ]
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        rules:
          - allow: { method: GET, path: "/v1/status" }
  orders:
    binaries: [ { path: /usr/bin/python3 } ]
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: tools/call, tool: lookup_order }
`

type benchCase struct {
	name     string
	method   string
	body     map[string]any
	parallel int
	// viaProxy: body["document"] is posted to http://policy.local through
	// the sandbox's proxy, as an agent would, instead of a Connect call.
	viaProxy bool
}

const letters = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// globs are n globs of `segments` segments with `stars` stars each, every
// one with letters of its own (`*a*b*c*`, `*a*b*c*/*d*e*f*`), joined by
// sep; the letters go round the alphabet.
func globs(n, segments, stars int, sep string) []string {
	var out []string
	k := 0
	for range n {
		var segs []string
		for range segments {
			seg := "*"
			for range stars - 1 {
				seg += string(letters[k%len(letters)]) + "*"
				k++
			}
			segs = append(segs, seg)
		}
		out = append(out, strings.Join(segs, sep))
	}
	return out
}

func prefixed(prefix string, xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = prefix + x
	}
	return out
}

// addRule is a proposal adding one REST endpoint that allows GET on paths.
func addRule(paths []string) map[string]any {
	var b strings.Builder
	b.WriteString("rationale: proverdos\noperations:\n  - add_rule:\n      name: evil\n      rule:\n        binaries: [ { path: /usr/bin/curl } ]\n        endpoints:\n          - host: evil.example.com\n            port: 443\n            protocol: rest\n            rules:\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "              - allow: { method: GET, path: %q }\n", p)
	}
	return map[string]any{"document": b.String()}
}

// maxAllowRules is the largest proposal the advisor parses: 32
// add_allow_rules operations of 64 rules each, on the existing endpoint,
// every path a distinct literal of `length` bytes.
func maxAllowRules(length int) map[string]any {
	var b strings.Builder
	b.WriteString("rationale: proverdos\noperations:\n")
	for op := range 32 {
		b.WriteString("  - add_allow_rules:\n      policy: api\n      host: api.example.com\n      port: 443\n      rules:\n")
		for r := range 64 {
			p := fmt.Sprintf("/v1/%02d/%02d/", op, r)
			p += strings.Repeat("x", max(0, length-len(p)))
			fmt.Fprintf(&b, "        - allow: { method: GET, path: %q }\n", p)
		}
	}
	return map[string]any{"document": b.String()}
}

// prove is a Prove request of basePolicy against basePolicy plus entries.
func prove(entries string) map[string]any {
	return map[string]any{"current": basePolicy, "proposed": basePolicy + entries}
}

func restEntry(name, host string, bins, paths []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n    binaries:\n", name)
	for _, bin := range bins {
		fmt.Fprintf(&b, "      - { path: %q }\n", bin)
	}
	fmt.Fprintf(&b, "    endpoints:\n      - host: %q\n        port: 443\n        protocol: rest\n        rules:\n", host)
	for _, p := range paths {
		fmt.Fprintf(&b, "          - allow: { method: GET, path: %q }\n", p)
	}
	return b.String()
}

func cases() []benchCase {
	const (
		submit = "portcullis.v1.AdvisorService/SubmitProposal"
		proveM = "portcullis.v1.ProverService/Prove"
	)
	var out []benchCase
	// The proposals, and the worst within the intake bounds.
	out = append(out,
		benchCase{name: "proposal 8×/v1/*a*b*c*", method: submit, body: addRule(prefixed("/v1/", globs(8, 1, 4, "/")))},
		benchCase{name: "proposal 12×/v1/*a*b*c*", method: submit, body: addRule(prefixed("/v1/", globs(12, 1, 4, "/")))},
		benchCase{name: "proposal 16×/v1/*a* (budget)", method: submit, body: addRule(prefixed("/v1/", globs(16, 1, 2, "/")))},
		benchCase{name: "proposal 16×/v1/*a*/** (narrowness)", method: submit, body: addRule(suffixed(prefixed("/v1/", globs(16, 1, 2, "/")), "/**"))},
		benchCase{name: "proposal 32 ops × 64 literal paths", method: submit, body: maxAllowRules(60)},
		benchCase{name: "policy.local 12×/v1/*a*b*c*", viaProxy: true, body: addRule(prefixed("/v1/", globs(12, 1, 4, "/")))},
		benchCase{name: "policy.local 16×/v1/*a* (budget)", viaProxy: true, body: addRule(prefixed("/v1/", globs(16, 1, 2, "/")))},
		benchCase{name: "policy.local 4× 16×/v1/*a* at once", viaProxy: true, parallel: 4, body: addRule(prefixed("/v1/", globs(16, 1, 2, "/")))},
	)
	// Prove requests: any valid document.
	out = append(out,
		benchCase{name: "prove 12×/v1/*a*b*c*", method: proveM, body: prove(restEntry("evil", "evil.example.com", []string{"/usr/bin/curl"}, prefixed("/v1/", globs(12, 1, 4, "/"))))},
		benchCase{name: "prove 12×/v1/*a*b*c*/*d*e*f*", method: proveM, body: prove(restEntry("evil", "evil.example.com", []string{"/usr/bin/curl"}, prefixed("/v1/", globs(12, 2, 4, "/"))))},
		benchCase{name: "prove 64×/*a*b*c*d*e*f*g*h*", method: proveM, body: prove(restEntry("evil", "evil.example.com", []string{"/usr/bin/curl"}, prefixed("/", globs(64, 1, 9, "/"))))},
		benchCase{name: "prove 16 binary globs", method: proveM, body: prove(restEntry("evil", "evil.example.com", prefixed("/usr/bin/", globs(16, 1, 4, "/")), []string{"/v1/x"}))},
		benchCase{name: "prove 16 host globs", method: proveM, body: prove(hostGlobs(16))},
		benchCase{name: "prove 16 tool globs", method: proveM, body: prove(toolGlobs(16))},
		benchCase{name: "prove 64 query matchers", method: proveM, body: prove(queryRules(64))},
		benchCase{name: "prove 2.5 MB of endpoints", method: proveM, body: prove(manyEndpoints(5 << 19))},
		benchCase{name: "prove 4× 12×/v1/*a*b*c* at once", method: proveM, parallel: 4, body: prove(restEntry("evil", "evil.example.com", []string{"/usr/bin/curl"}, prefixed("/v1/", globs(12, 1, 4, "/"))))},
	)
	return out
}

func suffixed(xs []string, suffix string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x + suffix
	}
	return out
}

// hostGlobs is n endpoints whose hosts are first-label globs.
func hostGlobs(n int) string {
	var b strings.Builder
	for i, g := range globs(n, 1, 4, "") {
		b.WriteString(restEntry(fmt.Sprintf("h%d", i), g+".example.com", []string{"/usr/bin/curl"}, []string{"/v1/x"}))
	}
	return b.String()
}

// toolGlobs is an MCP endpoint allowing tools/call on n tool globs.
func toolGlobs(n int) string {
	var b strings.Builder
	b.WriteString("  tools:\n    binaries: [ { path: /usr/bin/python3 } ]\n    endpoints:\n      - host: tools.example.com\n        port: 443\n        path: /mcp\n        protocol: mcp\n        rules:\n")
	for _, g := range globs(n, 1, 4, "") {
		fmt.Fprintf(&b, "          - allow: { method: tools/call, tool: %q }\n", g)
	}
	return b.String()
}

// queryRules is n rules each with a query matcher of several globs.
func queryRules(n int) string {
	var b strings.Builder
	b.WriteString("  query:\n    binaries: [ { path: /usr/bin/curl } ]\n    endpoints:\n      - host: query.example.com\n        port: 443\n        protocol: rest\n        rules:\n")
	gs := globs(n*4, 1, 4, "")
	for i := range n {
		fmt.Fprintf(&b, "          - allow:\n              method: GET\n              path: /v1/q%d\n              query:\n", i)
		for j := range 4 {
			fmt.Fprintf(&b, "                p%d: { any: [%q] }\n", j, gs[i*4+j])
		}
	}
	return b.String()
}

// manyEndpoints is about size bytes of distinct REST endpoints.
func manyEndpoints(size int) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		b.WriteString(restEntry(fmt.Sprintf("e%d", i), fmt.Sprintf("svc%d.example.com", i), []string{"/usr/bin/curl"}, []string{fmt.Sprintf("/v1/items/%d/*", i)}))
	}
	return b.String()
}
