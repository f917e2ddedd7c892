package decision

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"unicode/utf8"
)

// A 60 KB path (and a long reason) makes a small record: the fields are
// cut at a UTF-8 boundary, and the record says each cut field's length and
// SHA-256, so the whole value can still be matched.
func TestBound(t *testing.T) {
	path := "/" + strings.Repeat("é", 30<<10) // 60 KiB + 1, two bytes a rune
	reason := strings.Repeat("r", 4000)
	r := Record{Host: "h.example.com", Port: 443, Path: path, Reason: reason, Decision: Deny, DenialID: "dn_1"}
	Bound(&r)
	line, err := appendJSON(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	if len(line) > 2<<10 {
		t.Fatalf("record is %d bytes; want at most 2 KiB", len(line))
	}
	if len(r.Path) > PathLimit || !utf8.ValidString(r.Path) || !strings.HasPrefix(path, r.Path) || len(r.Path) < PathLimit-utf8.UTFMax {
		t.Errorf("path cut to %d bytes (valid UTF-8 %v); want a prefix of at most %d", len(r.Path), utf8.ValidString(r.Path), PathLimit)
	}
	digest := func(s string) string { d := sha256.Sum256([]byte(s)); return hex.EncodeToString(d[:]) }
	want := []Cut{{Field: "path", Length: len(path), SHA256: digest(path)}, {Field: "reason", Length: 4000, SHA256: digest(reason)}}
	if len(r.Cuts) != 2 || r.Cuts[0] != want[0] || r.Cuts[1] != want[1] {
		t.Fatalf("cuts = %+v; want %+v", r.Cuts, want)
	}
	if r.Host != "h.example.com" || r.DenialID != "dn_1" {
		t.Errorf("short fields changed: %+v", r)
	}
	Bound(&r)
	if len(r.Cuts) != 2 {
		t.Errorf("a second Bound cut again: %+v", r.Cuts)
	}
}
