package boundary

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  SidecarConfig
		want []string
	}{
		{"loopback", SidecarConfig{ProxyUID: 65532}, []string{
			"table inet portcullis {",
			"meta skuid 65532 return",
			"type nat hook output priority -110; policy accept;",
			"meta nfproto ipv4 udp dport 53 redirect to :3129",
			"meta nfproto ipv4 tcp dport 53 redirect to :3129",
			"meta nfproto ipv4 ip daddr 127.0.0.0/8 return",
			"meta nfproto ipv4 meta l4proto tcp redirect to :3129",
			"type filter hook output priority 0; policy drop;",
			"meta skuid 65532 accept",
			`oifname "lo" accept`,
			"meta nfproto ipv4 ct status dnat accept",
		}},
		{"pod address", SidecarConfig{Proxy: netip.MustParseAddrPort("10.0.0.5:3130"), ProxyUID: 1000}, []string{
			"meta skuid 1000 return",
			"meta nfproto ipv4 udp dport 53 dnat ip to 10.0.0.5:3130",
			"meta nfproto ipv4 meta l4proto tcp dnat ip to 10.0.0.5:3130",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Rules(tc.cfg)
			for _, w := range tc.want {
				if !strings.Contains(got, "\n\t\t"+w+"\n") && !strings.Contains(got, "\n"+w+"\n") {
					t.Errorf("want line %q in\n%s", w, got)
				}
			}
			// Replacing what an earlier run applied, in one transaction.
			if !strings.Contains(got, "table inet portcullis\ndelete table inet portcullis\n") {
				t.Errorf("the ruleset does not replace an earlier one:\n%s", got)
			}
		})
	}
}
