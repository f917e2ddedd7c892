// Package dataplane is the Portcullis proxy: the enforcement point every
// request leaving a sandbox passes.
//
// The pieces, each in its own file:
//
//   - matcher.go: Compile turns a validated policy into an immutable
//     Matcher, the fast path. Matcher.Decide agrees with policy.Decide on
//     every request (a rapid property test checks it); the proxy never
//     calls policy.Decide itself. jsonvalue.go decodes tools/call
//     arguments for the JSON Schema gate, which judges them with
//     policy.ValidateArguments as Decide does.
//   - mcp.go: ParseMCP, the strict reader of MCP Streamable HTTP request
//     bodies (JSON-RPC 2.0 objects and batches). Anything malformed is an
//     error, judged before policy and never forwarded.
//   - procid.go: the calling binary of a loopback connection and its
//     ancestors' (caller.go), found through /proc (socket inode → pid →
//     /proc/PID/exe, then up /proc/PID/stat's ppid to the proxy's own
//     lineage).
//   - ca.go: the proxy's CA and the leaf certificates it mints to terminate
//     TLS for L7 endpoints.
//   - proxy.go: the HTTP forward proxy — serving, destination checks on
//     the address actually dialled, judging each request, denials. A
//     CONNECT or absolute-URI host that is neither an IP literal nor a
//     host name (policy.ValidHostName: a '*', NUL, '%', space …) is
//     refused before policy and before any DNS query; a host name is
//     resolved only when some endpoint could match it
//     (Matcher.WantsAddress), and any other name is denied without a DNS
//     query. tunnel.go: L4 CONNECT tunnels (judged again as policy and
//     time change), whose first client bytes must name the CONNECT host (a
//     TLS server name, an HTTP Host) before any is forwarded, and which are
//     refused to an address where an inspected endpoint lives;
//     intercept.go: CONNECTs whose requests are inspected (TLS terminated
//     with the CA, resolved once per tunnel); forward.go and upstream.go: judged requests
//     sent upstream by the proxy's own HTTP/1.1 client, on connections
//     pooled per host and checked address, responses streamed back; framing.go: what Go's HTTP server would
//     quietly normalise or accept (Content-Length with Transfer-Encoding, a
//     Host header differing from the request URI, header lines ending in a
//     bare LF, folded header lines, header bytes that are not UTF-8, HTTP
//     versions other than 1.0 and 1.1), found on every request of a
//     connection by framing it as Go's server does.
//   - record.go: decision records (a bounded ring and JSON lines);
//     reload.go: the policy file, watched and swapped atomically.
//   - subscribe.go: gateway mode — the signed versions streamed from the
//     gateway, verified against the pinned key, applied through the same
//     swap, kept in the data dir and answered with ACK or NACK;
//     ship.go: decision records shipped to the gateway in batches
//     (Shipper.Flush waits until what is buffered has been stored).
//   - policylocal.go: the reserved host policy.local, answered by the
//     proxy itself before any policy applies and never dialled — the way
//     an untrusted agent, which holds no token, asks for access. Only
//     absolute-form http://policy.local[:80] requests are served (CONNECT
//     and https:// are refused with a pointer to http://), on strict
//     paths, methods, query parameters and bounded bodies. GET /v1/policy
//     (version, hash, canonical policy) and GET /v1/denials?last=N (the
//     decision ring's denials, newest first, each with advisor.FromDenial's
//     suggestion or why none is offered) answer from the proxy's own
//     state; POST /v1/proposals (a proposal file, or {denial_id,
//     rationale, idempotency_key} relayed after the denial is shipped),
//     GET /v1/proposals/{id} and /v1/proposals/{id}/wait?timeout= are
//     relayed to the gateway's AdvisorService on the subscription's
//     connection, with the proxy's sandbox token (Proxy.SetAdvisor; in
//     file mode they answer 503), gRPC errors mapped to HTTP statuses
//     with JSON bodies carrying the refusal or rate-limit detail.
//     policylocal_mcp.go: the same as an MCP server at
//     http://policy.local/mcp (official go-sdk, stateless) with the tools
//     list_denials, propose and proposal_status; refusals are tool
//     results with isError.
package dataplane
