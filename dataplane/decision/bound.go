package decision

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"
)

// Cut says Bound cut a field of a record: its JSON name, its length in
// bytes before the cut and the hex SHA-256 of its whole value, so the
// value can still be matched against one known elsewhere.
type Cut struct {
	Field  string `json:"field"`
	Length int    `json:"length"`
	SHA256 string `json:"sha256"`
}

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
// lists each cut in r.Cuts. A record's first Bound does the cutting; a
// second finds nothing to cut.
func (r *Record) Bound() {
	for _, f := range [...]struct {
		name  string
		v     *string
		limit int
	}{
		{"sandbox", &r.Sandbox, FieldLimit}, {"binary", &r.Binary, TextLimit}, {"host", &r.Host, FieldLimit},
		{"addr", &r.Addr, FieldLimit}, {"http_method", &r.HTTPMethod, FieldLimit}, {"path", &r.Path, PathLimit},
		{"mcp_method", &r.MCPMethod, FieldLimit}, {"tool", &r.Tool, FieldLimit}, {"entry", &r.Entry, FieldLimit},
		{"rule", &r.Rule, FieldLimit}, {"reason", &r.Reason, TextLimit}, {"policy_version", &r.PolicyVersion, FieldLimit},
		{"denial_id", &r.DenialID, FieldLimit}, {"arguments_digest", &r.ArgumentsDigest, FieldLimit},
		{"reason_code", &r.ReasonCode, FieldLimit}, {"tool_definition", &r.ToolDefinition, FieldLimit},
		{"trace_id", &r.TraceID, FieldLimit},
	} {
		if len(*f.v) <= f.limit {
			continue
		}
		sum := sha256.Sum256([]byte(*f.v))
		r.Cuts = append(r.Cuts, Cut{Field: f.name, Length: len(*f.v), SHA256: hex.EncodeToString(sum[:])})
		*f.v = cutUTF8(*f.v, f.limit)
	}
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
