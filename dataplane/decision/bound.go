package decision

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"
)

// The most bytes Bound keeps of a field: PathLimit of the path (with its
// query), TextLimit of the binary and the reason, FieldLimit of each other
// text field. A record's text is then at most about 5 KiB (about 6 times
// that in JSON were every byte a control character), whatever the request
// held; the gateway refuses fields over 2 KiB, so none is cut there.
const (
	PathLimit  = 1024
	TextLimit  = 512
	FieldLimit = 256
)

// Bound cuts r's fields longer than their limit (at a UTF-8 boundary) and
// lists each cut in r.Cuts, with the field's length and SHA-256 before the
// cut. A record's first Bound does the cutting; a second finds nothing to
// cut.
func Bound(r *Record) {
	// Values in and out, no pointers into r: a table of &r.Field would
	// move every record, allowed ones too, to the heap.
	r.Sandbox = cut(r, "sandbox", r.Sandbox, FieldLimit)
	r.Binary = cut(r, "binary", r.Binary, TextLimit)
	r.Host = cut(r, "host", r.Host, FieldLimit)
	r.Addr = cut(r, "addr", r.Addr, FieldLimit)
	r.HTTPMethod = cut(r, "http_method", r.HTTPMethod, FieldLimit)
	r.Path = cut(r, "path", r.Path, PathLimit)
	r.MCPMethod = cut(r, "mcp_method", r.MCPMethod, FieldLimit)
	r.Tool = cut(r, "tool", r.Tool, FieldLimit)
	r.Entry = cut(r, "entry", r.Entry, FieldLimit)
	r.Rule = cut(r, "rule", r.Rule, FieldLimit)
	r.Reason = cut(r, "reason", r.Reason, TextLimit)
	r.PolicyVersion = cut(r, "policy_version", r.PolicyVersion, FieldLimit)
	r.DenialID = cut(r, "denial_id", r.DenialID, FieldLimit)
	r.ArgumentsDigest = cut(r, "arguments_digest", r.ArgumentsDigest, FieldLimit)
	r.ReasonCode = cut(r, "reason_code", r.ReasonCode, FieldLimit)
	r.ToolDefinition = cut(r, "tool_definition", r.ToolDefinition, FieldLimit)
	r.TraceID = cut(r, "trace_id", r.TraceID, FieldLimit)
}

// cut is v, the field name of r, cut to limit bytes, the cut listed in
// r.Cuts; v itself when it is within the limit.
func cut(r *Record, name, v string, limit int) string {
	if len(v) <= limit {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	r.Cuts = append(r.Cuts, Cut{Field: name, Length: len(v), SHA256: hex.EncodeToString(sum[:])})
	return cutUTF8(v, limit)
}

// cutUTF8 is s's first n bytes or fewer, not splitting a UTF-8 sequence.
func cutUTF8(s string, n int) string {
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n] // not UTF-8 there: cut at n
}
