// Package prover computes exactly what a policy change adds: the requests
// the proposed policy allows and the current one denies (policy.Decide is
// the only judge), grouped into findings with a concrete counterexample
// each, plus rule-level findings no request can show.
//
// # Kinds
//
// Request-level (each with a counterexample): new_reach, or
// new_credentialed_reach when the destination is credentialed; new_path,
// new_http_method (OpenShell's capability_expansion when the destination
// is credentialed), new_mcp_method,
// new_mcp_tool, new_mcp_prompt, new_mcp_resource (a tools/call, prompts/get
// or resources/read|subscribe|unsubscribe whose method the current policy
// already allows for another tool, prompt or URI at that destination;
// otherwise the call is new_mcp_method); private_network,
// wildcard_widening (a glob in the allowing rule's host, binary, path,
// tool, prompt or resource that the current policy does not use there),
// exceeds_boundary; review_removed (a request the current policy allows
// only after a person's review, policy.Decision.Review, that the proposed
// one allows without: review dropped from a rule, or a new rule without
// review admitting some of a reviewed rule's calls) and review_added (the
// reverse, a tightening reported so that a reviewer sees it): a reviewed
// allow is a verdict of its own, and a review's timeout alone changes
// none (review.go); and
// l7_bypass_credentialed (OpenShell's category of that name): besides
// new_credentialed_reach, when the binary that gains the reach is one whose
// wire protocol the L7 proxy cannot inspect (L7Bypass: /usr/bin/git,
// /usr/bin/ssh, /usr/bin/nc, the entries of OpenShell's binary registry
// marked bypasses_l7, by exact path). Rule-level: arguments_widened,
// rate_limit_widened (a tools/call rule whose rate_limit a change removes
// or raises, conservatively: rules.go), tool_definition_changed (a
// tools/call rule that pins another definition, or none, where the current
// policy pins one; probes judge every pin as met), enforcement_weakened,
// cloud_metadata, mcp_oauth_opened (an MCP endpoint declaring OAuth paths,
// mcp.oauth, its destination did not serve: reported as a whole, the
// probes do not walk those paths). arguments_widened (any schema on a tools/call rule other
// than one identical to a current rule's, for a tool the current policy
// guards with a schema) quotes the schema and, when policy.Decide confirms
// one, carries a counterexample: the call with arguments built from the
// schema (for a const schema, exactly those) that the proposed policy
// allows and the current one denies. Every kind but new_path needs a
// human (approval.Blocking).
//
// # Credentialed destinations
//
// Options.Credentialed lists them: the hosts of the providers attached to
// the sandbox, which may be host patterns as endpoints write hosts
// (policy.ValidHostPattern: `*.github.com`, `**.example.com`,
// `*-x.googleapis.com`, a whole `*` middle label), and the exact hosts set
// with `sandbox credentials` (ParseHostPort refuses globs; ParseHostPattern
// reads a pattern). A request is credentialed when an entry has its port
// and a host matching its host (HostPort.Covers: policy.MatchHost, an IP
// address in any spelling). Each credentialed host is a host pattern of
// the groups it may meet, so its matches are part of every signature
// there: a class is wholly credentialed or not, and a wildcard endpoint
// over a credentialed host, an endpoint inside a credentialed pattern, or
// both patterns, yield a concrete credentialed host as a counterexample.
// Request-level findings (new_* and l7_bypass_credentialed) to one carry
// the Credentialed mark, and their detail names the destination.
//
// # Why it is exact
//
//  1. Locality. Decide's verdict on a request depends only on the multiset
//     of (entry binaries, endpoint) pairs whose host and port match it: the
//     deny phase and the candidates both filter on host and port first, and
//     combining outcomes does not depend on their order. Pairs present in
//     both policies cancel out, so every added request is addressed to the
//     host and port of a changed endpoint. Each changed destination is a
//     group; its sub-policies keep every endpoint whose host and ports may
//     overlap it (a conservative overlap test), so Decide on a sub-policy
//     equals Decide on the whole policy for the group's requests.
//  2. Atoms. Within a group, a request's signature is the vector of every
//     predicate Decide evaluates on it: each binary glob, host pattern,
//     allowed_ips list, the private/always-denied/metadata/loopback
//     classes, port, HTTP method, each path glob in both readings on the
//     canonical path under both allow_encoded_slash settings, each MCP
//     method glob, known-method membership, tool glob and exact name,
//     strict-name validity, each prompt glob in both readings, each
//     resource glob in both readings (policy.MatchResource,
//     policy.MatchDenyResource) with the URI's plainness (an automaton built
//     from policy.ResourceURIStep), and protocol version. Requests with equal
//     signatures get equal verdicts from every policy of the group.
//  3. Witnesses. For each dimension, every realisable combination of
//     pattern matches is found by exploring the product of automata
//     (automata.go), each with a witness; addresses by the regions of the
//     laminar family of allowed_ips prefixes (addrs.go). The product of
//     the dimensions' witnesses is deduplicated by signature and each class
//     is judged once by Decide under both policies.
//
// # Budget
//
// Exactness has a price: the witness search is exponential in the worst
// case (n globs like `/v1/*a*b*c*` realise 2^n combinations of matches,
// and each is a class). So every proof runs under a fixed budget
// (budget.go): its work (product states, matcher states, candidate
// requests, policy.Decide calls weighted by the sub-policy's size, policy
// scans) is counted against Options.Budget (DefaultBudget), the memory its
// search structures hold against MemoryBudget, and its context is polled.
// A proof that would exceed either returns a *TooComplexError (errors.Is
// ErrTooComplex): the change is refused as too complex, never answered
// partially or "unknown"; a cancelled context returns its error. At most
// two proofs run at once per process. Policies people write use a small
// fraction of the budget (budget_test.go).
//
// # Scope
//
// Requests are judged without MCP arguments (every arguments_schema is
// dropped before judging: what a schema change adds is the rule-level
// arguments_widened; a counterexample for a schema-guarded tool carries
// arguments built from the schema, and so does a review_removed or
// review_added one, confirmed on the whole policies; a new or changed
// tools/call rule without review is also tried on its own schema's
// arguments for review_removed) and at Options.Now. A review_added that
// only a schema shows (a schema narrowed beside a reviewed rule) is not
// found. Not split exactly:
// the query string (where rules have query matchers, the queries tried
// are none, each rule's matchers satisfied alone, all at once, and values
// no glob matches); the private and always-denied classes inside an
// allowed_ips region (sampled at its edges and at fixed addresses);
// percent-encoded bytes in paths other than an encoded slash (a glob
// naming `%XX` literally is matched only in the signature, and so are the
// deny readings of policy.MatchDenyPath that change escapes: `%3B`
// parameters stripped, non-ASCII letters folded; its case-folded and
// trailing-dot readings are split exactly, pathdeny.go).
// exceeds_boundary is judged on what the change adds. See STATUS.md.
package prover
