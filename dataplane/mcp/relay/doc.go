// Package relay is what the proxy does with the MCP answers it relays, and
// what it keeps of them between requests. It reads with dataplane/mcp and
// judges nothing itself: which tools an agent may see is asked of the
// proxy's judging (Shows).
//
//   - toolslist.go: Response reads one answer of an MCP endpoint on its way
//     to the agent — tools/list results cut to the tools the agent may see
//     (a JSON answer, or an event stream event by event, a GET stream's
//     replays included); a result that cannot be read strictly (or an
//     event whose data is not JSON) is answered with an error instead, and
//     an event without a message (a priming event, a comment) passes as it
//     came (FuzzCopyEvents reads what the agent gets as two clients would,
//     neither finding a tool the proxy did not filter).
//   - pins.go: the definitions of MCP tools (the fingerprint of each tool
//     seen listed, per endpoint, stale after a list_changed or 30 s; none
//     for a tool a listing names twice), and the proxy's own listing, in
//     the caller's session, of the tools a pinned call needs verified
//     (Verify, through an Upstream).
//   - replies.go: the requests servers send clients on the streams the
//     proxy relays, per session, so that a client's answer to one may be
//     larger than mcp.max_body_bytes (up to mcp.max_response_bytes).
package relay
