// Package strmap is how both store engines keep a map[string]string
// (provenance, audit detail) in one column: a JSON object. It lives here,
// not in each engine, so the stored form cannot drift between them.
package strmap

import (
	"encoding/json"
	"fmt"
	"maps"
)

// Encode returns m as a JSON object ("{}" when empty).
func Encode(m map[string]string) ([]byte, error) {
	if len(m) == 0 {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode map: %w", err)
	}
	return b, nil
}

// Decode reads what Encode stored; an empty object reads as nil.
func Decode(b []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode map: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// Clone returns what a round trip through the database would: nil when
// empty, else a copy the caller cannot change under us.
func Clone(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
