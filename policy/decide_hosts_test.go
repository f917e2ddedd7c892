package policy

import "testing"

// IPv6 forms that carry an IPv4 address (SIIT, 6to4, Teredo, local-use
// NAT64 in every layout) are always denied when the address they carry
// is, as a literal host and as the resolved address, even when a hostless
// allowed_ips endpoint or an IP-literal endpoint names them.
func TestDecideEmbeddedIPv4Denied(t *testing.T) {
	open := func(host string) *Policy {
		return pol(map[string]*NetworkPolicy{"all": entry(nil, &Endpoint{Host: host, Port: 80})})
	}
	hostless := pol(map[string]*NetworkPolicy{"all": entry(nil, &Endpoint{Port: 80, AllowedIPs: []string{"2000::/4"}})})
	var cases []decideCase
	for _, a := range []string{
		"::ffff:0:a9fe:a9fe", "2002:a9fe:a9fe::", "2001:0:a9fe:a9fe::1", "2001:0:4136:e378:8000:63bf:5601:5601",
		"64:ff9b:1:a9fe:a9:fe00::", "2002:7f00:1::", "2001:0:4136:e378:8000:63bf:80ff:fffe",
	} {
		cases = append(cases,
			decideCase{"literal " + a, open(a), req("["+a+"]", 80).at(""), want{reason: "always denied"}},
			decideCase{"resolved " + a, open("rebind.example.com"), req("rebind.example.com", 80).at(a), want{reason: "always-denied"}},
			decideCase{"hostless " + a, hostless, req("x.example.com", 80).at(a), want{reason: "always-denied"}},
		)
	}
	// The private check sees them too: 6to4 of 10.0.0.1 needs allowed_ips.
	cases = append(cases,
		decideCase{"6to4 of a private address", open("svc.example.com"), req("svc.example.com", 80).at("2002:a00:1::"), want{reason: "private address"}},
		decideCase{"6to4 of a public address", open("svc.example.com"), req("svc.example.com", 80).at("2002:808:808::"), want{allow: true}},
	)
	runDecide(t, cases)
}
