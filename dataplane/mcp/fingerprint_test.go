package mcp

import (
	"strings"
	"testing"
)

// Fingerprint is RFC 8785 then SHA-256: the same tool in any key order,
// spacing, number spelling or string escaping has one fingerprint (the
// expected value computed apart, with Python's sorted compact JSON, which
// equals JCS for this object), and any change of a field changes it.
func TestFingerprint(t *testing.T) {
	const want = "sha256:65310fd979e247d011741dc46e70b70d12e54d528591ab99aeca26cca9da7017"
	for _, def := range []string{
		`{"name":"lookup_order","description":"Look up an order — by id.\n","inputSchema":{"type":"object","properties":{"order_id":{"type":"string","maxLength":100}}},"annotations":{"readOnlyHint":true}}`,
		"{ \"annotations\" : {\"readOnlyHint\":true},\n \"inputSchema\":{\"properties\":{\"order_id\":{\"maxLength\":1e2,\"type\":\"string\"}},\"type\":\"object\"},\n" +
			` "name":"lookup_\u006frder", "description":"Look up an order \u2014 by id.\u000a"}`,
	} {
		got, err := Fingerprint([]byte(def))
		if err != nil || got != want {
			t.Errorf("Fingerprint(%s) = %s, %v; want %s", def, got, err, want)
		}
	}
	changed, err := Fingerprint([]byte(`{"name":"lookup_order","description":"Look up an order — by id. ","inputSchema":{"type":"object","properties":{"order_id":{"type":"string","maxLength":100}}},"annotations":{"readOnlyHint":true}}`))
	if err != nil || changed == want || !strings.HasPrefix(changed, "sha256:") {
		t.Errorf("a changed description: %s, %v", changed, err)
	}
}
