package gateway_test

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// The document-wide note on private resolution of exact hostnames is
// said once per sandbox: on the set that brings it, not on every later
// set (nor an unchanged one) whose version before had it already. Warnings
// about a field are always said; ValidatePolicy says everything.
func TestSetPolicyPrivateResolutionNoteOnce(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	ctx := t.Context()
	mustCreateSandbox(t, c, "orders")
	note := func(ws []*portcullisv1.Problem) int {
		n := 0
		for _, w := range ws {
			if strings.Contains(w.GetMessage(), "resolve to a private address") {
				n++
				if len(w.GetMessage()) > 120 {
					t.Errorf("the note is %d characters long: %q", len(w.GetMessage()), w.GetMessage())
				}
			}
		}
		return n
	}
	set := func(doc string) *portcullisv1.PolicyVersion {
		t.Helper()
		v, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "orders", Document: doc})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v1, v2 := readFile(t, "testdata/orders-v1.json"), readFile(t, "testdata/orders-v2.yaml")
	if got := set(v1); note(got.GetWarnings()) != 1 {
		t.Fatalf("first set: warnings %v; want the private-resolution note once", got.GetWarnings())
	}
	if got := set(v2); got.GetVersion() != 2 || note(got.GetWarnings()) != 0 {
		t.Errorf("second set: version %d, warnings %v; want version 2 without the note", got.GetVersion(), got.GetWarnings())
	}
	if got := set(v2); !got.GetUnchanged() || note(got.GetWarnings()) != 0 {
		t.Errorf("unchanged set: warnings %v; want no note", got.GetWarnings())
	}
	// A field's warning is still said.
	tls := strings.Replace(v2, "protocol: mcp", "protocol: mcp\n        tls: terminate", 1)
	if got := set(tls); len(got.GetWarnings()) == 0 || note(got.GetWarnings()) != 0 {
		t.Errorf("set with a deprecated field: warnings %v; want the field's warning, not the note", got.GetWarnings())
	}
	vr, err := c.policy.ValidatePolicy(ctx, &portcullisv1.ValidatePolicyRequest{Document: v2})
	if err != nil || note(vr.GetWarnings()) != 1 {
		t.Errorf("validate: %v, warnings %v; want the note", err, vr.GetWarnings())
	}
}
