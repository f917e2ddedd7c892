// Package policylocal owns the reserved host policy.local, answered by the
// proxy itself before any policy applies and never dialled: the way an
// untrusted agent, which holds no token, asks for access. Only
// absolute-form http://policy.local[:80] requests are served (CONNECT and
// https:// are refused with a pointer to http://), on strict paths,
// methods, query parameters and bounded bodies.
//
// GET /v1/policy and GET /v1/denials?last=N answer from the proxy's own
// state (State: the policy in force, the decision ring), each denial with
// advisor.FromDenial's suggestion or why none is offered. POST
// /v1/proposals, GET /v1/proposals/{id} and /v1/proposals/{id}/wait are
// relayed to the gateway's AdvisorService with the proxy's sandbox token
// (Server.SetAdvisor; in file mode they answer 503), gRPC errors mapped to
// HTTP statuses with JSON bodies carrying the refusal or rate-limit
// detail ("refusals": every violation the advisor found, in order; the
// first also as "refusal"). A gateway that cannot be reached answers 503
// gateway_unavailable at once, also for a proposal from a denial, whose
// records the shipper could not send (Shipper.Flush returns on the failed
// attempt). Numbers are JSON numbers: a proposal's ids, the version in
// force (a file-mode label, "sha256:…", stays a string). mcp.go serves the same as an MCP server at
// http://policy.local/mcp (official go-sdk, stateless) with the tools
// list_denials, propose and proposal_status; refusals are tool results
// with isError.
//
// A proposal from a denied tools/call carries the call's arguments, which
// the proxy keeps in memory for its recent denials (State.DeniedArguments;
// records carry only their digest): a denial by an arguments_schema is
// proposed as exactly those arguments, and the gateway checks them against
// the record's digest.
package policylocal
