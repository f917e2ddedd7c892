// Package match owns the proxy's fast path: Compile turns a validated
// policy into an immutable Matcher whose Decide agrees with policy.Decide
// on every request, reason text included (a rapid property test checks
// it); the proxy never calls policy.Decide itself. The Matcher also
// answers what the proxy asks before it reads a request (Inspect,
// WantsAddress, NamesBinaries, MCPLimits, RateLimit).
//
// Files: matcher.go (compiling, Decide, hard denials, default deny),
// destinations.go (endpoints matching a destination, deny rules),
// judge.go (allow rules: REST paths and queries, MCP methods, tools,
// reviewed allows (Decision.Review: an unreviewed allow wins) and
// the arguments_schema gate, whose tools/call arguments jsonvalue.go
// decodes with the strict reader (internal/strictjson) and fastschema.go admits without the schema library when the
// schema and arguments are plainly simple), queries.go (the proxy's questions), ratelimit.go (the
// rate_limit of the rule behind an allow, for the proxy's token buckets),
// hosts.go (host patterns and allowed_ips), paths.go (canonical paths and
// globs, compiled from policy.CompileGlobChars so both read a pattern
// alike).
package match
