package main

import (
	"bytes"
	"fmt"
	"text/template"

	"github.com/portcullis-dev/portcullis/bench/internal/orderspolicy"
	"github.com/portcullis-dev/portcullis/policy"
)

// benchPolicy is the policy file the proxy runs with: the article's
// orders policy for the upstream at 127.0.0.1:PORT, with every per-request
// feature an MCP endpoint can turn on switched on, so the figures are what
// such a policy costs:
//
//   - tools/call lookup_order allowed only through its arguments_schema
//     (order_id matching ^[A-Z]-\d{4}$, nothing else), refund_order denied;
//   - tools/list filtering (mcp.filter_tools_list, on by default; written
//     out so a reader sees it);
//   - a rate_limit on lookup_order, at the highest rate the policy
//     language takes, so it costs its bucket on every call and never
//     refuses one in a run;
//   - with -pins (the default, fixed upstream), lookup_order's definition
//     pinned: the proxy fingerprints every list it relays and, before the
//     first call and every 30 s after, lists the tools itself to verify it;
//   - with -binaries, the calling binary named: the load generator's
//     executable, so the proxy identifies each new client connection
//     through /proc (which needs every process's fds readable: where one
//     is not, the caller is unknown and every request denied, so it is
//     off by default; with no binaries named the proxy looks nothing up).
//
// To measure another feature, add it here and, when it changes what the
// proxy answers, a check to verify (load.go).
var benchPolicy = template.Must(template.New("policy").Parse(orderspolicy.Head + `      - host: {{.Host}}
        port: {{.Port}}
{{- if .AllowedIPs}}
        allowed_ips: ["{{.AllowedIPs}}"]
{{- end}}
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25"]
          filter_tools_list: true
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
          - allow: { method: tools/list }
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema:
                type: object
                properties:
                  order_id: { type: string, pattern: "^[A-Z]-\\d{4}$" }
                required: [order_id]
                additionalProperties: false
              rate_limit: { requests_per_minute: {{.Rate}}, burst: {{.Rate}} }
{{- if .Pin}}
              definition: "{{.Pin}}"
{{- end}}
        deny_rules:
          - { method: tools/call, tool: refund_order }
{{- if .Binary}}
    binaries:
      - path: {{.Binary}}
{{- end}}
`))

// policyDoc is the bench policy for the upstream on port, for binary
// ("": any), with lookup_order's fixed definition pinned when pin, checked
// to parse (the proxy would deny everything otherwise).
//
// host is the upstream's address: 127.0.0.1 (the proxy runs with
// --dev-allow-loopback), or the namespace's address for the transparent
// path, a TEST-NET address the policy opens with allowed_ips.
func policyDoc(host string, port int, binary string, pin bool) ([]byte, error) {
	fp := ""
	if pin {
		var err error
		if fp, err = policy.DefinitionFingerprint([]byte(fixedLookupOrder)); err != nil {
			return nil, fmt.Errorf("bench policy: %w", err)
		}
	}
	var b bytes.Buffer
	if err := benchPolicy.Execute(&b, map[string]any{"Host": host, "AllowedIPs": allowedIPs(host), "Port": port, "Binary": binary, "Rate": policy.MaxRateLimit, "Pin": fp}); err != nil {
		return nil, fmt.Errorf("bench policy: %w", err)
	}
	if _, _, err := policy.Parse(b.Bytes()); err != nil {
		return nil, fmt.Errorf("bench policy: %w\n%s", err, b.Bytes())
	}
	return b.Bytes(), nil
}

// allowedIPs is the allowed_ips entry a non-loopback upstream needs ("" for loopback).
func allowedIPs(host string) string {
	if host == "127.0.0.1" {
		return ""
	}
	return host + "/32"
}
