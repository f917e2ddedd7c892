package sentry

import "github.com/portcullis-dev/portcullis/internal/jcs"

// maxDepth bounds the nesting of an event's JSON, so that a hostile event
// cannot make a reader recurse without end.
const maxDepth = 32

// join appends key to a dotted path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// canonicalJSON returns the RFC 8785 (JSON Canonicalization Scheme) form
// of raw (internal/jcs): a signer in any language with a JCS library
// produces the same bytes. raw must already have passed the strict reader.
func canonicalJSON(raw []byte) ([]byte, error) { return jcs.Transform(raw, maxDepth+1) }
