package apitext

import (
	"bytes"
	"strings"
	"testing"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A refused set's grants are listed a line each, the proposal's rationale
// on one line; Stored says what a set or a rollback stored.
func TestRemovedGrantsAndStored(t *testing.T) {
	var b bytes.Buffer
	RemovedGrants(&b, []*portcullisv1.RemovedGrant{{Proposal: 3, Granted: "demo-mcp:8081 tools/call track", Rationale: "track\nshipments"}})
	if want := "  proposal 3: demo-mcp:8081 tools/call track  (track shipments)\n"; !strings.HasSuffix(b.String(), want) {
		t.Errorf("RemovedGrants = %q, want it to end with %q", b.String(), want)
	}
	pv := &portcullisv1.PolicyVersion{Version: 4, Hash: "3f2a0123456789abcdef"}
	if got := Stored("orders", pv, 0); got != "orders: version 4 (sha256 3f2a01234567…)" {
		t.Errorf("Stored(set) = %q", got)
	}
	if got := Stored("orders", pv, 2); got != "orders: version 4 (sha256 3f2a01234567…), the content of version 2" {
		t.Errorf("Stored(rollback) = %q", got)
	}
	pv.Provenance = map[string]string{"removed_grants": "1,3"}
	if got := Stored("orders", pv, 0); got != "orders: version 4 (sha256 3f2a01234567…), taking away what proposals 1,3 granted" {
		t.Errorf("Stored(grants taken away) = %q", got)
	}
	pv.Unchanged = true
	if got := Stored("orders", pv, 0); got != "orders: unchanged, still version 4" {
		t.Errorf("Stored(unchanged) = %q", got)
	}
}
