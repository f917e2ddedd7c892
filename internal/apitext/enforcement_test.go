package apitext

import (
	"testing"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// The error names every refusing proxy with its reason (control
// characters and all cut to one line) and the pending ones.
func TestEnforcementError(t *testing.T) {
	e := &portcullisv1.Enforcement{Sandbox: "orders", Version: 4, Acked: 1, Nacked: 1, Pending: 1, Total: 3, Proxies: []*portcullisv1.ProxyEnforcement{
		{ProxyId: "p1", State: "acked"},
		{ProxyId: "p2", State: "nacked", Error: "cannot\x1b[31m compile\nshipping"},
		{ProxyId: "p3", State: "pending"},
	}}
	got := (&EnforcementError{Enforcement: e}).Error()
	if want := "version 4 of sandbox orders refused by proxy p2 (cannot [31m compile shipping); still pending: p3 (1 of 3 connected proxies ACKed)"; got != want {
		t.Errorf("NACK:\n got %q\nwant %q", got, want)
	}
	e.Nacked, e.Proxies[1].State = 0, "pending"
	got = (&EnforcementError{Enforcement: e, Timeout: 30 * time.Second}).Error()
	if want := "version 4 of sandbox orders not enforced within 30s; still pending: p2, p3 (1 of 3 connected proxies ACKed)"; got != want {
		t.Errorf("timeout:\n got %q\nwant %q", got, want)
	}
}
