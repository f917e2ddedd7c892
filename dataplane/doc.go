// Package dataplane is the Portcullis proxy: the enforcement point every
// request leaving a sandbox passes. It owns the judging — the Agent that
// assembles and runs a proxy, and what the proxy decides of each request
// — and uses its subpackages for the rest:
//
//   - h1: the HTTP/1.x engine — the server the proxy's clients talk to
//     (the judging is its http.Handler), the upstream client and its pools,
//     raw socket I/O, the GOMAXPROCS switch, the connection limit;
//   - match: the compiled policy (Compile, Matcher), agreeing with
//     policy.Decide on every request;
//   - mcp: the strict reader of MCP request bodies and of tools/list
//     results; mcp/relay: what the proxy does with the MCP answers it
//     relays (tools/list filtering, tool definition pins and its own
//     listing to verify them, the server's requests whose answers may be
//     larger);
//   - jsonlex: the JSON lexing match's and mcp's readers share;
//   - identity: the calling binary and its ancestors, through /proc;
//   - decision: decision records, their ring and JSON-lines log;
//   - gatewayclient: gateway mode's signed-version subscription and
//     decision shipping;
//   - policylocal: the reserved host policy.local;
//   - ratelimit: rate_limit's token buckets, one per rule, charged at
//     the proxy's own clock, never backwards;
//   - hold: the calls held for review, their bounds and outcome, and the
//     agent's answer while one waits;
//   - tunnelstart: the start of a tunnel's client stream (a TLS
//     ClientHello, an HTTP request head), judged against the host the
//     tunnel was granted for before any byte is forwarded;
//   - transparent: a redirected connection's original destination
//     (SO_ORIGINAL_DST) and the Writer it is judged with;
//   - internal/ca (outside dataplane, shared with the gateway): the CA
//     that terminates TLS for inspected endpoints.
//
// Files here:
//
//   - agent.go: Agent, the only way to run a proxy. New(Config) builds it
//     with its policy source (a watched policy file, or the gateway
//     subscription with its shipper and policy.local's advisor relay);
//     Serve(ctx, Listeners) (Run(ctx, ln): the proxy listener alone)
//     serves and owns every goroutine it starts, returning
//     once all have ended. Test seams are Config fields (Resolve, Caller,
//     Now, Gateway.Refuse), never build tags or environment variables.
//   - process.go: what a proxy process adds around its Agent
//     (Config.Process): the data dir (the decision log rotated by size,
//     a standalone proxy's CA, the kept proxy id), a RecordSink run
//     beside the proxy for every decision record (the CLI's OCSF
//     emitters), and when to release the executable's pages and free
//     heap (internal/exetrim).
//   - config.go: Config. proxy.go: Proxy, the policy version in force and
//     what the proxy keeps; serve runs the h1 server on the listener.
//   - client.go: the proxy's view of a client connection (its caller,
//     looked up once, when the policy names binaries).
//   - handler.go: ServeHTTP, every request's first stop (policy.local,
//     CONNECT, absolute-form HTTP), and CONNECT's judging.
//   - dest.go: destinations, checked on the address actually dialled. A
//     CONNECT or absolute-URI host that is neither an IP literal nor a
//     host name (policy.ValidHostName: a '*', NUL, '%', space …) is
//     refused before policy and before any DNS query; a host name is
//     resolved only when some endpoint could match it
//     (Matcher.WantsAddress), and any other name is denied without a DNS
//     query. Requests for policy.local go to policylocal before any
//     policy applies.
//   - http.go: one HTTP request judged, from the connection's framing
//     problem (h1.Problem) to the forward; mcp.go: an MCP POST judged —
//     its body read strictly, each message judged (a pinned tools/call's
//     tool listed by the proxy itself when its definition is unknown),
//     rate limits charged — and which tools a tools/list answer may show
//     (visibility, the policy's part of relay's filtering).
//   - record.go: denials (403, a JSON-RPC error for MCP), decision
//     records, their summaries and the denied calls' arguments kept for
//     policy.local.
//   - tunnel.go: L4 CONNECT tunnels (judged again as policy and time
//     change), whose first client bytes must name the CONNECT host (a TLS
//     server name, an HTTP Host) before any is forwarded, and which are
//     refused to an address where an inspected endpoint lives.
//   - transparent.go: connections the kernel redirected to the
//     transparent listener (Listeners.Transparent), each judged as a
//     CONNECT to where it was sent, named by the sandbox's DNS
//     (Config.Names) or by its address alone.
//   - intercept.go: CONNECTs whose requests are inspected (TLS terminated
//     with the CA, resolved once per tunnel, served by an h1 server of
//     their own).
//   - forward.go: judged requests sent upstream through h1's pools (to
//     the checked address, with the canonical path and the judged body),
//     responses streamed back, MCP answers through relay's filter.
//   - ratelimit.go: rate_limit — after an allow, each tools/call takes a
//     token from its rule's bucket (package ratelimit: all or nothing for
//     a batch); too few tokens is a 429 with retry_after_seconds (none
//     when the request has more calls on a rule than its burst: no wait
//     makes it pass), recorded as rate_limited; buckets are charged at
//     the proxy's own clock, never backwards.
//     The buckets are this proxy's own (N proxies of a sandbox admit N
//     times the rate), one per rule (rules differing only in their
//     arguments_schema share one), kept across reloads while the rule
//     is unchanged.
//   - held.go: a reviewed allow's call held (package hold) until a
//     person decides it, recorded once decided, forwarded once approved.
//   - trace.go: request spans (Config.Tracer).
//   - reload.go: the policy file, watched and swapped atomically.
package dataplane
