// Package strictjson is the one strict JSON reader of the proxy, the
// gateway and the Sentry intake. encoding/json lets through what a second
// reader of the same bytes may read otherwise: it keeps the last of two
// equal keys, reads invalid UTF-8 and lone UTF-16 surrogate escapes as
// U+FFFD, and has no bound on numbers but its own. A Reader refuses all of
// these — a duplicate key (optionally ignoring case, as encoding/json
// matches struct fields), invalid UTF-8, a lone surrogate, a number a
// float64 cannot hold (optionally), nesting past a bound, anything after
// the value — and hands each value's exact bytes to the caller, so that
// what is judged or signed is what was sent.
//
// A Reader is read like a cursor: Kind says what comes next, Skip reads a
// whole value (checked, not kept) and returns its bytes, ReadString
// decodes a string, and Open, Member and Element walk into an object or
// an array. A caller keeps only what it needs (the MCP reader the members
// of a message and its params, the Sentry reader an event's first levels)
// and skips the rest in one tight pass. Its first error is kept (Err) and
// makes every later call a no-op, so a walk checks it once. Decode reads a
// whole value into maps and slices, as jsonschema.UnmarshalJSON does.
//
// It links into the proxy, its proxy-only build and the gateway alike, so
// it uses the standard library only.
package strictjson
