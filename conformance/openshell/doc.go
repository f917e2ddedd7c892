// Package openshell is a conformance suite: cases ported by hand from
// NVIDIA OpenShell's own tests (github.com/NVIDIA/OpenShell at 2f7fb655),
// each naming the OpenShell file and test it comes from and asserting the
// outcome OpenShell's test asserts. It has no code of its own: everything
// is in its _test.go files and runs with `go test ./conformance/...`.
//
// What runs where:
//   - decisions (opa.rs, the query cases of rest.rs, the address cases of
//     proxy.rs) through policy.Decide and the data plane's compiled matcher
//     (match.Compile), which must agree on every field;
//   - path canonicalisation (l7/path.rs) through policy.CanonicalPath;
//   - validation and round trips (openshell-policy's lib.rs, l7_validate.rs, ambiguity.rs,
//     the supervisor's l7/mod.rs, the validation tests of opa.rs and
//     proxy.rs, e2e/python's
//     test_policy_validation.py) through policy.Parse;
//   - the prover (openshell-prover's lib.rs, queries.rs, credentials.rs
//     and report.rs, and its use by the gateway in openshell-server's
//     grpc/policy.rs) through prover.Prove against an empty or given
//     current policy, with the credential's target hosts, or the hosts of
//     the attached providers' profiles (patterns among them), as
//     Options.Credentialed;
//   - agent proposals (policy_local.rs) through advisor.ParseProposal and
//     advisor.Apply;
//   - HTTP framing and request-target handling (rest.rs, path.rs) and the
//     JSON-RPC/MCP body inspector (l7/jsonrpc.rs) through the real proxy
//     (dataplane.New and Agent.Run on 127.0.0.1:0) to a real upstream, judged
//     by what the upstream received;
//   - a WebSocket client's frames (l7/websocket.rs, at OpenShell 0dc1f493)
//     through the proxy's client-side relay, wsframe.Rewriter.Relay, judged
//     by the frames it writes upstream.
//
// A case that differs from OpenShell on purpose keeps OpenShell's outcome
// and names the divergence it follows (Divergence, with our outcome in
// Ours): private ranges need allowed_ips even for exact hostnames;
// protocols the proxy does not inspect yet (graphql, websocket, json-rpc,
// sql) deny, so their documents load with a warning and OpenShell's
// protocol-specific document checks do not apply; a tcp endpoint is an L4
// endpoint, its document checked as one (an IP-literal host accepted, no
// ambiguity with an L4 endpoint on its host:port); endpoints
// that can match one connection may disagree on tls and allowed_ips, as
// OpenShell's file loader accepts (its gateway loader refuses); `..` at the
// root resolves to / (RFC 3986); proposals are an allow-list of narrow
// changes. DESIGN's other divergences (omitted enforcement means enforce,
// a single `*` in an allow glob stays in one segment, the MCP extensions)
// change no outcome OpenShell's tests assert. Nothing is skipped: a case
// we fail for any other reason fails, naming the OpenShell file and test.
//
// # Adding a case
//
// Find the test in OpenShell, pick the table for its kind (decideCase in
// opa_test.go and friends, validateCase, canonCase, proxyCase,
// proverCase, advisorCase), and add a row: Source is the prefix constant
// for the file plus the test's name ("…/opa.rs: l7_get_allowed_by_rules"),
// Policy is the test's YAML unchanged (OpenShell's Rego fixtures omit
// `version: 1`; the harness adds it), the request is the test's input and
// OpenShell is the verdict it asserts. A test with several assertions may
// have several rows with the same Source. Fixtures shared by many tests
// live verbatim in fixtures_test.go and testdata/. A new table must be
// listed in TestDocCounts (count_test.go), which prints the numbers for
// the table below when they change.
//
// # Cases per source file
//
// OpenShell tests ported (cases); TestDocCounts keeps this table true:
//
//	crates/openshell-supervisor-network/src/opa.rs           158 (170)
//	crates/openshell-supervisor-network/src/l7/mod.rs         57 (64)
//	crates/openshell-supervisor-network/src/l7/path.rs        28 (61)
//	crates/openshell-supervisor-network/src/l7/rest.rs        31 (37)
//	crates/openshell-supervisor-network/src/l7/jsonrpc.rs     22 (25)
//	crates/openshell-supervisor-network/src/l7/websocket.rs   25 (25)
//	crates/openshell-supervisor-network/src/proxy.rs          69 (75)
//	crates/openshell-supervisor-network/src/policy_local.rs    2 (2)
//	crates/openshell-policy/src/lib.rs                        64 (70)
//	crates/openshell-policy/src/l7_validate.rs                20 (20)
//	crates/openshell-policy/src/ambiguity.rs                  13 (14)
//	crates/openshell-prover/src/lib.rs                         5 (6)
//	crates/openshell-prover/src/queries.rs                     6 (10)
//	crates/openshell-prover/src/credentials.rs                 6 (33)
//	crates/openshell-prover/src/report.rs                      2 (3)
//	crates/openshell-server/src/grpc/policy.rs                 5 (10)
//	e2e/python/test_policy_validation.py                       4 (4)
//	total                                                    517 (629)
//
// Not ported: tests of OpenShell internals with no counterpart here
// (engine generations and reloads, middleware, credential injection and
// signing, GraphQL inspection (over WebSocket too), inference routing, OCSF
// logging, symlink resolution through /proc, accept-loop back-off).
package openshell
