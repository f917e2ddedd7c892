// Package dataplane is the Portcullis proxy: the enforcement point every
// request leaving a sandbox passes.
//
// The pieces, each in its own file:
//
//   - matcher.go: Compile turns a validated policy into an immutable
//     Matcher, the fast path. Matcher.Decide agrees with policy.Decide on
//     every request (a rapid property test checks it); the proxy never
//     calls policy.Decide itself. jsonvalue.go decodes tools/call
//     arguments for the JSON Schema gate.
//   - mcp.go: ParseMCP, the strict reader of MCP Streamable HTTP request
//     bodies (JSON-RPC 2.0 objects and batches). Anything malformed is an
//     error, judged before policy and never forwarded.
//   - procid.go: the calling binary of a loopback connection, found through
//     /proc (socket inode → pid → /proc/PID/exe).
//   - ca.go: the proxy's CA and the leaf certificates it mints to terminate
//     TLS for L7 endpoints.
//   - proxy.go: the HTTP forward proxy — serving, destination checks on
//     the address actually dialled, judging each request, denials;
//     tunnel.go: L4 CONNECT tunnels (judged again as policy and time
//     change); intercept.go: CONNECTs whose requests are inspected (TLS
//     terminated with the CA); forward.go and upstream.go: judged requests
//     sent upstream by the proxy's own HTTP/1.1 client, on connections
//     pooled per host and checked address, responses streamed back; framing.go: what Go's HTTP server would
//     quietly normalise (Content-Length with Transfer-Encoding, a Host
//     header differing from the request URI).
//   - record.go: decision records (a bounded ring and JSON lines);
//     reload.go: the policy file, watched and swapped atomically.
//   - subscribe.go: gateway mode — the signed versions streamed from the
//     gateway, verified against the pinned key, applied through the same
//     swap, kept in the data dir and answered with ACK or NACK;
//     ship.go: decision records shipped to the gateway in batches.
package dataplane
