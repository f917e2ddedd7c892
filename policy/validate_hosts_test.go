package policy

import "testing"

// parseProblem parses doc and reports whether it has a problem (error)
// at path whose message contains msg.
func parseProblem(t *testing.T, doc, path, msg string) {
	t.Helper()
	_, _, err := Parse([]byte(doc))
	if err == nil {
		t.Fatalf("Parse accepted the document, want %s: %q", path, msg)
	}
	if ps := problemsOf(t, err); !hasProblem(ps, path, msg) {
		t.Errorf("no problem %s containing %q; got %v", path, msg, err)
	}
}

// Hosts and allowed_ips naming an always-denied address through an IPv6
// form that carries it (SIIT, 6to4, Teredo, local-use NAT64) are refused.
func TestValidateEmbeddedIPv4(t *testing.T) {
	tests := []struct{ name, doc, path, msg string }{
		{"SIIT metadata host", withEndpoint("{host: '::ffff:0:a9fe:a9fe', port: 80}"), ep0 + ".host", "metadata"},
		{"6to4 metadata host", withEndpoint("{host: '2002:a9fe:a9fe::', port: 80}"), ep0 + ".host", "metadata"},
		{"Teredo client metadata host", withEndpoint("{host: '2001:0:4136:e378:8000:63bf:5601:5601', port: 80}"), ep0 + ".host", "metadata"},
		{"local-use NAT64 /48 metadata host", withEndpoint("{host: '64:ff9b:1:a9fe:a9:fe00::', port: 80}"), ep0 + ".host", "metadata"},
		{"6to4 metadata allowed_ips", withEndpoint("{host: a.example.com, port: 80, allowed_ips: ['2002:6464:64c8::/48']}"), ep0 + ".allowed_ips[0]", "metadata"},
		{"6to4 link-local allowed_ips", withEndpoint("{host: a.example.com, port: 80, allowed_ips: ['2002:a9fe::/32']}"), ep0 + ".allowed_ips[0]", "6to4 form"},
		{"SIIT loopback allowed_ips", withEndpoint("{host: a.example.com, port: 80, allowed_ips: ['::ffff:0:7f00:1/128']}"), ep0 + ".allowed_ips[0]", "SIIT"},
		{"Teredo allowed_ips", withEndpoint("{host: a.example.com, port: 80, allowed_ips: ['2001::/32']}"), ep0 + ".allowed_ips[0]", "Teredo"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { parseProblem(t, tc.doc, tc.path, tc.msg) })
	}
	// A 6to4 host of a loopback address is always denied: the validator
	// says so (a warning, as for 127.0.0.1).
	_, warns := mustParse(t, withEndpoint("{host: '2002:7f00:1::', port: 80}"))
	if !hasProblem(warns, ep0+".host", "6to4 form of 127.0.0.1") {
		t.Errorf("no always-denied warning for a 6to4 loopback host: %v", warns)
	}
}
