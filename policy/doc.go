// Package policy is the Portcullis policy language: the document types
// (OpenShell `version: 1`, unchanged, plus the `arguments_schema`,
// `rate_limit`, `definition`, `prompt`, `resource`, `expires_at`, review's
// `timeout`, `mcp.versions` and `mcp.filter_tools_list` extensions), the strict
// YAML/JSON codec, validation with field paths, the canonical form and its
// SHA-256 hash, the structural diff, and the reference evaluator Decide.
//
// Decide is written to be obviously right, not fast. It is the single
// definition of what a policy means; the data plane's compiled matcher and
// the prover are checked against it. Every rule below fails closed.
//
// # Documents
//
// Parse reads YAML or JSON strictly: unknown fields, wrong types, duplicate
// keys and every validation rule are reported together, each with its field
// path (network_policies.orders.endpoints[0].port). Validation refuses, in
// addition to OpenShell's own rules: a host or allowed_ips entry naming a
// cloud-metadata address; allowed_ips overlapping loopback, link-local or
// unspecified ranges in any IPv6 spelling; an mcp endpoint sharing its
// host:port with a differently inspected endpoint, or disagreeing with
// another mcp endpoint there; a fail_closed middleware over a `tls: skip`
// endpoint; credential_binding on uninspected traffic without
// allow_uninspected_credentials. As OpenShell's ambiguity check does, it
// refuses two endpoints that can match one request (hosts, ports and
// competing path scopes overlap) but disagree on credential_binding's
// provider; they may disagree on tls and allowed_ips (see the
// divergences). These checks compare only
// endpoints that can meet (a shared port, and the same exact host or
// address, or a wildcard or hostless one), and a document that would need
// more than 2^20 such comparisons is refused: no policy people write needs
// them, and a sandbox could otherwise spend minutes of the gateway's CPU
// through Prove.
//
// OpenShell shapes accepted as OpenShell reads them: hostless endpoints
// matched by allowed_ips alone (not on mcp, nor, as in OpenShell, on
// tcp); whole-label `*` after the first host label
// (`*.s3.*.amazonaws.com`, at least two literal labels after the last
// wildcard — stricter than OpenShell); query matchers as a
// glob string, {glob: g} or {any: [globs]}, whose globs read `{a,b}` as
// alternatives, as OpenShell's Rego does (deny path globs too); protocol
// names in any case (`REST`, canonically `rest`). As in OpenShell, port
// with ports is an error; a query glob that does not parse, an unknown
// access preset (it allows nothing) and `tls: skip` on an L7 endpoint on
// port 443 are warnings. A query glob that does not parse fails closed
// (no value in an allow rule, every value in a deny rule).
//
// The canonical form (Canonical, CanonicalJSON, Hash) fills defaults, folds
// spellings (case, trailing dots, IP notation, port vs ports, params.name vs
// tool, matcher shapes) and sorts lists whose order means nothing, so two
// documents that mean the same hash the same. It never changes meaning.
// An endpoint's rules and deny_rules keep the document's order and
// positions: every message names a rule as the user's file numbers it
// (rules[4] is its fifth entry), and the first matching allow rule is the
// one a decision names and whose rate_limit it charges. A document with
// its rules reordered is therefore another version.
//
// # Decisions
//
// A request is the calling binary, the destination host, the resolved
// address and port, and for L7 endpoints the HTTP method and path (MCP: the
// JSON-RPC message). Decide applies, in order:
//
//  1. Always denied, whatever the policy and even in audit mode: loopback
//     (except with the proxy's --dev-allow-loopback), link-local,
//     unspecified, multicast and reserved addresses, the cloud-metadata and
//     credential addresses and names, in every spelling (decimal, hex,
//     octal, short inet_aton forms, IPv4-mapped, IPv4-compatible and NAT64
//     IPv6, trailing dots, any case, full-width), and the control-plane
//     ports 2379, 2380, 6443, 10250, 10255. An IP-literal host must be the
//     address dialled. IPv6 forms that carry an IPv4 address are judged as
//     that address too: IPv4-mapped and -compatible, SIIT ::ffff:0:0/96,
//     NAT64 (64:ff9b::/96, and 64:ff9b:1::/48 in every RFC 6052 layout),
//     6to4 2002::/16 and Teredo 2001::/32 (server and XORed client).
//     Host-name patterns match only host names ([a-z0-9_-] labels): a NUL
//     or '*' under a wildcard matches nothing.
//  2. Deny wins everywhere: the deny rules of every endpoint whose
//     destination (host, port, path scope) matches apply, whichever entry
//     would allow the request. A deny rule that cannot be checked (no L7
//     view, a malformed path or message) denies. Deny globs are read widely
//     (MatchDenyGlob: OpenShell's `*` that crosses `/`, and an optional
//     trailing slash); deny path globs also match every spelling a common
//     server routes to the path (MatchDenyPath: any case, trailing dots and
//     spaces, `%3B` parameters, decoded encoded slashes), and expand the
//     glob's `{a,b}` alternatives (ExpandDenyPathGlob). A rule on GET
//     also matches HEAD, in allow and deny rules (as in OpenShell).
//  3. Allow: some entry whose binaries match (none listed = any binary; a
//     listed binary must be a known, clean absolute path) has an endpoint
//     whose destination matches and whose rules allow the request. Allow
//     globs are read narrowly (MatchGlob: `*` stays in one segment, only
//     `**` crosses). Rules whose expires_at has passed allow nothing.
//  4. Otherwise deny. `enforcement: audit` lets a rule denial through with
//     Audit set, never a hard denial, and never grants what no entry grants.
//
// MCP (Streamable HTTP): each POST message is judged alone; GET and DELETE
// follow the endpoint match; client→server JSON-RPC responses pass; tool
// names must match ^[A-Za-z0-9_.-]{1,128}$ unless strict_tool_names is
// false (then tool rules compare exactly); the protocol version must be
// listed in mcp.versions (default 2025-11-25; a message naming none is taken
// as that version); allow_all_known_mcp_methods allows the client methods of
// MCP 2025-11-25 only; mcp.oauth (our extension) lets the endpoint's
// host:port serve the OAuth paths MCPOptions.OAuthPath lists, as plain
// HTTP, beside its MCP path; mcp.max_response_bytes (default 4 MiB, our
// extension) bounds a client's answers to requests the server sent it,
// where mcp.max_body_bytes bounds everything else; mcp.filter_tools_list (default true, our extension)
// has the proxy show in tools/list results only the tools a tools/call
// could be allowed for (Decide with MCPMessage.AnyArguments: as if every
// arguments_schema accepted); arguments_schema must accept params.arguments — as
// written and as a float64 reader reads its numbers, with format asserted,
// and every number at most 100 characters and finite and (unless zero)
// nonzero as a float64, so that judging a call costs what its size does
// (ValidateArguments); definition "sha256:<hex>" (our extension, on a
// tools/call allow rule naming one tool) allows the rule's calls only when
// MCPMessage.ToolDefinition, the fingerprint of the tool's definition the
// proxy verified, is the pinned one, and a call it refuses is denied naming
// the rule with DefinitionRefused (reason code tool_definition_changed).
//
// prompt and resource (our extensions) name what a prompts/get or a
// resources call acts on. prompt (method prompts/get only) matches
// params.name with MatchGlob in allow rules and MatchDenyGlob in deny
// rules; strict_tool_names does not apply to it. resource (methods
// resources/read, resources/subscribe, resources/unsubscribe only; no
// braces) matches params.uri exactly as sent: MatchResource in allow rules,
// MatchDenyResource in deny rules. No URI is normalised; a URI that is not
// plain (PlainResourceURI: one spelling of its scheme, authority, escapes
// and path) matches no allow rule's resource and every deny rule's, so
// another spelling of a resource can neither widen an allow nor dodge a
// deny. A prompts/get without a prompt name, or a resources call without a
// URI, is malformed (MalformedMCP). A broad rule (the method without its
// matcher) cannot sit beside matcher-specific allow rules of that method,
// as for tools.
//
// rate_limit {requests_per_minute, burst} (MCP tools/call allow rules
// only; both integers 1..MaxRateLimit, burst defaulting to
// requests_per_minute, which the canonical form writes out) is a token
// bucket the proxy keeps per rule: Decide ignores it, since a decision is
// stateless. Each proxy keeps its own buckets, so N proxies of one sandbox
// admit N times the rate. A call over the limit is answered 429 and
// recorded as rate_limited, which is never turned into a proposal.
//
// review {required, timeout} (OpenShell's flag; the timeout is ours: a Go
// duration above 0 and at most MaxReviewTimeout, DefaultReviewTimeout when
// omitted) stands on allow rules of REST endpoints and MCP tools/call
// allow rules only. A call such a rule allows is a reviewed allow
// (Decision.Review): the proxy holds it until a person approves that very
// call. An unreviewed allow wins: a request that any rule allows without
// review is allowed without review, and among reviewed rules the first
// that admits the call sets the timeout. Audit mode never lifts a review.
// The canonical form drops a review that is not required and writes a
// required one's timeout out (FormatReviewTimeout: "2m", "1m30s").
//
// # Divergences from OpenShell, all toward safety
//
// The validator warns about each where a document relies on it:
//   - an omitted enforcement means enforce (OpenShell: audit);
//   - a private, shared or special-purpose address (RFC 1918, CGNAT, ULA,
//     TEST-NETs, …) needs allowed_ips even for an exact hostname;
//   - a single `*` in an allow rule's path, an endpoint's path scope or a
//     binary glob stays within one `/` segment, while deny rules keep
//     OpenShell's wider reading, so an imported document never allows more
//     nor denies less;
//   - deny path globs ignore case and the other spellings MatchDenyPath
//     reads (OpenShell matches the canonical path exactly);
//   - an encoded `;` (`%3B`) in a path is data, kept encoded when
//     forwarded (OpenShell decodes it and strips what follows), and a `.`
//     or `..` next to an encoded `/`, `\` or `;` is refused (OpenShell
//     resolves `..%3B` as `..`);
//   - `..` at the root resolves to `/`, as RFC 3986 §5.2.4 does, so
//     `/..` is `/` and `/a/../../admin` is `/admin` (OpenShell refuses the
//     request);
//   - `{a,b}` alternatives in a deny path glob (and, on the deny side, an
//     endpoint's path scope) are expanded as OpenShell's glob.match
//     expands them, but an allow path glob reads braces literally and so
//     matches no request path (OpenShell allows each alternative); the
//     validator warns;
//   - endpoints that can match one connection may disagree on tls and
//     allowed_ips, as OpenShell's file loader and Rego evaluation accept
//     (opa.rs l7_overlapping_policies_*; its gateway loader refuses them):
//     each endpoint is judged with its own allowed_ips, and tls: skip never
//     turns inspection off, so nothing depends on which endpoint is read;
//   - endpoints of protocols the proxy does not inspect yet (graphql,
//     websocket, json-rpc, sql) deny every request to their destination,
//     even one another endpoint would allow. A tcp endpoint (OpenShell's
//     transparent TCP) is judged as an L4 endpoint: it allows a connection
//     as a whole, through the proxy's transparent listener or CONNECT.
package policy
