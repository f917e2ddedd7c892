// Package dataplane is the Portcullis proxy: the enforcement point every
// request leaving a sandbox passes. It owns serving — the Agent that
// assembles and runs a proxy, and the proxy's own request handling — and
// uses its subpackages for the rest:
//
//   - match: the compiled policy (Compile, Matcher), agreeing with
//     policy.Decide on every request;
//   - mcp: the strict reader of MCP request bodies and of tools/list
//     results;
//   - jsonlex: the JSON lexing match's and mcp's readers share;
//   - identity: the calling binary and its ancestors, through /proc;
//   - decision: decision records, their ring and JSON-lines log;
//   - gatewayclient: gateway mode's signed-version subscription and
//     decision shipping;
//   - policylocal: the reserved host policy.local;
//   - internal/ca (outside dataplane, shared with the gateway): the CA
//     that terminates TLS for inspected endpoints.
//
// Files here:
//
//   - agent.go: Agent, the only way to run a proxy. New(Config) builds it
//     with its policy source (a watched policy file, or the gateway
//     subscription with its shipper and policy.local's advisor relay);
//     Run(ctx, ln) serves and owns every goroutine it starts, returning
//     once all have ended. Test seams are Config fields (Resolve, Caller,
//     Now, Gateway.Refuse), never build tags or environment variables.
//   - process.go: what a proxy process adds around its Agent
//     (Config.Process): the data dir (the decision log rotated by size,
//     a standalone proxy's CA, the kept proxy id), a RecordSink run
//     beside the proxy for every decision record (the CLI's OCSF
//     emitters), and when to release the executable's pages and free
//     heap (internal/exetrim).
//   - proxy.go: the HTTP forward proxy — destination checks on
//     the address actually dialled, judging each request, denials. A
//     CONNECT or absolute-URI host that is neither an IP literal nor a
//     host name (policy.ValidHostName: a '*', NUL, '%', space …) is
//     refused before policy and before any DNS query; a host name is
//     resolved only when some endpoint could match it
//     (Matcher.WantsAddress), and any other name is denied without a DNS
//     query. Requests for policy.local go to policylocal before any
//     policy applies.
//   - tunnel.go: L4 CONNECT tunnels (judged again as policy and time
//     change), whose first client bytes must name the CONNECT host (a TLS
//     server name, an HTTP Host) before any is forwarded, and which are
//     refused to an address where an inspected endpoint lives.
//   - intercept.go: CONNECTs whose requests are inspected (TLS terminated
//     with the CA, resolved once per tunnel).
//   - forward.go, upstream*.go and httpresponse.go: judged requests sent
//     upstream by the proxy's own HTTP/1.1 client, on connections pooled
//     per host and checked address, responses read by its own strict
//     reader (FuzzResponseReader compares it with Go's) and streamed
//     back.
//   - pins.go: what the proxy knows of MCP tools' definitions (the
//     fingerprint of each tool it saw listed, per endpoint, stale after a
//     list_changed or 30 s; none for a tool a listing names twice), and
//     its own listing, in the caller's session, of the tools a pinned
//     call needs verified.
//   - replies.go: the requests servers send clients on the streams the
//     proxy relays, per session, so that a client's answer to one may be
//     larger than mcp.max_body_bytes (up to mcp.max_response_bytes).
//   - toolslist.go: tools/list results (a JSON answer, or an event
//     stream event by event, a GET stream's replays included) cut to the
//     tools the policy in force would let the agent call; a result that
//     cannot be read strictly (or an event whose data is not JSON) is
//     answered with an error instead, and an event without a message (a
//     priming event, a comment) passes as it came (FuzzCopyEvents reads
//     what the agent gets as two clients would, neither finding a tool
//     the proxy did not filter).
//   - server.go and httpread.go: the proxy's own HTTP/1.x server for its
//     clients (the listener's connections and intercepted tunnels'): one
//     strict reading of each request decides both what is judged and
//     where the next request starts. What Go's server refuses is refused
//     the same way (FuzzRequestReader compares the two readers); what Go
//     would quietly normalise or accept (Content-Length with
//     Transfer-Encoding, a Host header differing from the request URI,
//     lines ending in a bare LF, folded header lines, header bytes that
//     are not UTF-8, HTTP versions other than 1.0 and 1.1) marks the
//     connection: its requests are denied naming the problem, and it
//     closes.
//   - rawio_linux.go: the sockets of both servers and of the upstream
//     client are read and written with raw system calls through
//     syscall.RawConn (the runtime's poller still waits and keeps
//     deadlines), which spares each request the wakeup of the runtime's
//     monitor thread that Go's own socket calls make after an idle spell
//     (recvfrom and sendto with MSG_DONTWAIT, so that none can block; not
//     on linux/386, and not under the race detector, which cannot see
//     them).
//   - procs.go: with Config.AdaptProcs (the CLI's default unless
//     GOMAXPROCS is set), the proxy runs on one P while it serves one
//     request at a time, which spares each request the scheduler's
//     wakeup of a second thread, and on Go's default P count from the
//     moment two requests overlap until none have for a second.
//   - ratelimit.go: rate_limit — after an allow, each tools/call takes a
//     token from its rule's bucket (all or nothing for a batch); too few
//     tokens is a 429 with retry_after_seconds (none when the request has
//     more calls on a rule than its burst: no wait makes it pass),
//     recorded as rate_limited; buckets are charged at the proxy's own
//     clock, never backwards.
//     The buckets are this proxy's own (N proxies of a sandbox admit N
//     times the rate), one per rule (rules differing only in their
//     arguments_schema share one), kept across reloads while the rule
//     is unchanged.
//   - limit.go: the bound on client connections served at once.
//   - reload.go: the policy file, watched and swapped atomically.
package dataplane
