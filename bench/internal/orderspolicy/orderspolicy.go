// Package orderspolicy holds the parts of the article's orders policy that
// every benchmark's fixture shares: the document's opening up to the
// orders endpoints, and the MCP tools an agent may call on the orders
// server, with lookup_order behind its argument schema and refund_order
// denied. pushload pushes them as a realistic document, and sentryload's
// sandboxes run them; proxyload writes the same rules out with a
// rate_limit added (its policy.go). One copy keeps them measuring the
// same policy.
package orderspolicy

import (
	"strconv"
	"strings"
)

// Head opens a policy document whose first network policy is orders: a
// fixture continues it with the orders endpoint ("      - host: …").
const Head = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
`

// ToolRules is the tail of the orders MCP endpoint: its last allow rules
// (tools/list, then tools/call of lookup_order with an order_id such as
// "A-1234" and nothing else) and its deny rules. It is indented for an
// endpoint in a network policy's endpoints list and ends with a newline,
// so a fixture writes the endpoint's head and its earlier rules (such as
// initialize), then ToolRules, then what follows the endpoint.
const ToolRules = `          - allow: { method: tools/list }
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema:
                type: object
                properties:
                  order_id: { type: string, pattern: "^[A-Z]-\\d{4}$" }
                required: [order_id]
                additionalProperties: false
        deny_rules:
          - { method: tools/call, tool: refund_order }
`

// RESTTail ends a document after ToolRules: the orders policy's binaries,
// then two read-only REST endpoints, the last on port PORT, which Variant
// fills in so that each variant is a new version.
const RESTTail = `    binaries: []
  github:
    name: github-api-readonly
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: read-only
    binaries:
      - { path: /usr/bin/curl }
  packages:
    name: package-index
    endpoints:
      - host: pypi.org
        port: PORT
        protocol: rest
        enforcement: enforce
        access: read-only
    binaries: []
`

// Variant is doc (ending in RESTTail) as its k-th version: PORT becomes
// 10000+k.
func Variant(doc string, k int) string {
	return strings.Replace(doc, "PORT", strconv.Itoa(10000+k), 1)
}
