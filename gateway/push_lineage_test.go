package gateway_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/signing"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Every version the gateway sends names, signed, its parent's lineage (none
// for version 1); a proxy that holds an older version than the one before
// gets the hashes of the versions between. A NACK marked fork is counted
// in portcullis_push_forks_total and shown in proxies list.
func TestPolicyStreamNamesTheParent(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	ctx := context.Background()
	created, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "orders", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	first := policyStream(t, gw, created.Token)
	if err := first.Send(hello("orders", "p0")); err != nil {
		t.Fatal(err)
	}
	v1 := recvPolicy(t, first)
	if v1.GetVersion() != 1 || v1.GetParent() != "" || len(v1.GetAncestry()) != 0 {
		t.Fatalf("version 1 names parent %q, ancestry %v; want none", v1.GetParent(), v1.GetAncestry())
	}
	for _, port := range []string{"8443", "9443", "10443"} {
		if _, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "orders", Document: strings.Replace(pushPolicy, "443", port, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := c.policy.ListPolicyVersions(ctx, &portcullisv1.ListPolicyVersionsRequest{Sandbox: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	var hashes []string
	lineage := ""
	for _, v := range list.GetVersions()[:3] {
		hashes = append(hashes, v.GetHash())
		lineage = signing.Lineage(lineage, v.GetVersion(), v.GetHash())
	}

	for _, tc := range []struct {
		id       string
		held     uint32
		ancestry []string
	}{
		{"fresh", 0, nil},
		{"behind", 1, hashes[1:3]},
		{"next", 3, nil},
	} {
		st := policyStream(t, gw, created.Token)
		h := hello("orders", tc.id)
		if tc.held > 0 {
			h.GetHello().HeldVersion, h.GetHello().HeldHash = tc.held, hashes[tc.held-1]
		}
		if err := st.Send(h); err != nil {
			t.Fatal(err)
		}
		v4 := recvPolicy(t, st)
		if v4.GetVersion() != 4 || v4.GetParent() != lineage || !slices.Equal(v4.GetAncestry(), tc.ancestry) {
			t.Fatalf("%s: version %d, parent %q, ancestry %v; want 4, %q, %v", tc.id, v4.GetVersion(), v4.GetParent(), v4.GetAncestry(), lineage, tc.ancestry)
		}
		keys := v4.GetKeys()
		if len(keys) == 0 {
			t.Fatalf("%s: no key chain", tc.id)
		}
		if err := signing.VerifyPolicy(v4, keys[len(keys)-1].GetPublicKey()); err != nil {
			t.Fatalf("%s: %v", tc.id, err)
		}
		if tc.id != "fresh" {
			continue
		}
		nack := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Nack{Nack: &portcullisv1.PolicyNack{
			Nonce: v4.Nonce, Version: 4, Hash: v4.Hash, Error: "policy fork: version 4 does not descend from the version 3 held", Fork: true}}}
		if err := st.Send(nack); err != nil {
			t.Fatal(err)
		}
		got := waitProxy(t, c, gw, "orders", "fresh", func(p *portcullisv1.ProxyStatus) bool { return p.LastNackVersion == 4 })
		if !strings.Contains(got.LastNackError, "policy fork") {
			t.Fatalf("status %v", got)
		}
		wantSamples(t, scrape(t, gw), map[string]float64{"portcullis_push_forks_total": 1, "portcullis_push_nacks_total": 1})
	}
}
