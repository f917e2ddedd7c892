package prover

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// Credentialed destinations as attached providers' hosts: host patterns
// (policy.ValidHostPattern) as well as exact hosts.

// withEntry is cur and an entry "added" granting bin host:port (L4).
func withEntry(cur *policy.Policy, bin, host string, port int) *policy.Policy {
	prop := cur.Clone()
	if prop.NetworkPolicies == nil {
		prop.NetworkPolicies = map[string]*policy.NetworkPolicy{}
	}
	prop.NetworkPolicies["added"] = &policy.NetworkPolicy{
		Name:      "added",
		Endpoints: []*policy.Endpoint{{Host: host, Port: port}},
		Binaries:  []policy.Binary{{Path: bin}},
	}
	return prop
}

// checkCredentialed fails unless every finding that carries a request
// and the credentialed mark has a counterexample the proposed policy
// allows, the current one denies, and some credentialed entry covers, with
// a concrete host; and every unmarked new_* finding's counterexample is
// not credentialed.
func checkCredentialed(t *testing.T, cur, prop *policy.Policy, opts Options, rep *Report) {
	t.Helper()
	for _, f := range rep.Findings {
		r := f.Counterexample
		if r == nil || f.Kind == ExceedsBoundary || f.Kind == ReviewAdded || f.Kind == ReviewRemoved {
			continue
		}
		if !policy.Decide(prop, *r).Allow || policy.Decide(cur, *r).Allow {
			t.Fatalf("%s: counterexample %s is not added by the proposal", f.Kind, describe(*r))
		}
		if strings.ContainsAny(r.Host, "*?[") {
			t.Fatalf("%s: counterexample host %q is not concrete", f.Kind, r.Host)
		}
		marks := strings.HasPrefix(f.Kind, "new_") || f.Kind == L7BypassCredentialed
		if marks && f.Credentialed != credentialedIn(opts, *r) {
			t.Fatalf("%s marked credentialed=%v, but its counterexample %s is credentialed=%v under %v", f.Kind, f.Credentialed, describe(*r), !f.Credentialed, opts.Credentialed)
		}
		if f.Credentialed && !strings.Contains(f.Detail, "credentialed destination "+r.Host+":") {
			t.Fatalf("%s detail %q does not name the credentialed destination %s", f.Kind, f.Detail, r.Host)
		}
	}
}

func TestCredentialedPatterns(t *testing.T) {
	cur := parse(t, credCurrent) // /usr/bin/gh: GET api.github.com:443/repos/**
	cases := []struct {
		name      string
		cred      []HostPort
		host      string
		port      int
		credHost  string // want new_credentialed_reach with this host ("": none); "*" any host the proposal allows
		plainHost string // want an unmarked new_reach with this host ("": none)
	}{
		{name: "exact endpoint inside a credentialed *", cred: []HostPort{{"*.github.com", 443}}, host: "api.github.com", port: 443, credHost: "api.github.com"},
		{name: "exact endpoint, credentialed * on another port", cred: []HostPort{{"*.github.com", 8443}}, host: "api.github.com", port: 443, plainHost: "api.github.com"},
		{name: "exact endpoint outside a credentialed *", cred: []HostPort{{"*.github.com", 443}}, host: "github.com", port: 443, plainHost: "github.com"},
		{name: "* endpoint, credentialed exact host", cred: []HostPort{{"api.github.com", 443}}, host: "*.github.com", port: 443, credHost: "api.github.com", plainHost: "*"},
		{name: "* endpoint, the same credentialed *", cred: []HostPort{{"*.github.com", 443}}, host: "*.github.com", port: 443, credHost: "*"},
		{name: "* endpoint, upper-case credentialed * with a dot", cred: []HostPort{{"*.GitHub.com.", 443}}, host: "*.github.com", port: 443, credHost: "*"},
		{name: "** endpoint, credentialed *", cred: []HostPort{{"*.github.com", 443}}, host: "**.github.com", port: 443, credHost: "*", plainHost: "*"},
		{name: "* endpoint, credentialed **", cred: []HostPort{{"**.github.com", 443}}, host: "*.github.com", port: 443, credHost: "*"},
		{name: "deep exact endpoint, credentialed **", cred: []HostPort{{"**.example.com", 443}}, host: "a.b.example.com", port: 443, credHost: "a.b.example.com"},
		{name: "apex endpoint, credentialed **", cred: []HostPort{{"**.example.com", 443}}, host: "example.com", port: 443, plainHost: "example.com"},
		{name: "label pattern, exact endpoint inside", cred: []HostPort{{"*-aiplatform.googleapis.com", 443}}, host: "us-central1-aiplatform.googleapis.com", port: 443, credHost: "us-central1-aiplatform.googleapis.com"},
		{name: "label pattern, exact endpoint outside", cred: []HostPort{{"*-aiplatform.googleapis.com", 443}}, host: "aiplatform.googleapis.com", port: 443, plainHost: "aiplatform.googleapis.com"},
		{name: "middle * label, * endpoint", cred: []HostPort{{"*.s3.*.amazonaws.com", 443}}, host: "*.s3.us-east-1.amazonaws.com", port: 443, credHost: "*"},
		{name: "disjoint patterns", cred: []HostPort{{"*.gitlab.com", 443}}, host: "*.github.com", port: 443, plainHost: "*"},
		{name: "IP credential, IP endpoint", cred: []HostPort{{"93.184.216.34", 443}, {"*.github.com", 443}}, host: "93.184.216.34", port: 443, credHost: "93.184.216.34"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prop := withEntry(cur, "/usr/bin/python3", c.host, c.port)
			opts := Options{Credentialed: c.cred}
			rep := prove(t, cur, prop, opts)
			checkCredentialed(t, cur, prop, opts, rep)
			k := kinds(rep)
			check := func(kind, want string) {
				t.Helper()
				if want == "" {
					if len(k[kind]) != 0 {
						t.Fatalf("want no %s:%s", kind, show(rep.Findings))
					}
					return
				}
				if len(k[kind]) != 1 {
					t.Fatalf("want one %s:%s", kind, show(rep.Findings))
				}
				r := k[kind][0].Counterexample
				if r.Binary != "/usr/bin/python3" || want != "*" && r.Host != want {
					t.Fatalf("%s counterexample %s, want /usr/bin/python3 → %s", kind, describe(*r), want)
				}
			}
			check(NewCredentialedReach, c.credHost)
			var plain []Finding
			for _, f := range k[NewReach] {
				if f.Credentialed {
					t.Fatalf("new_reach marked credentialed:%s", show(rep.Findings))
				}
				plain = append(plain, f)
			}
			k[NewReach] = plain
			check(NewReach, c.plainHost)
		})
	}
}

// OpenShell's capability_expansion (a new method on a (binary, host, port)
// that already had credentialed reach) is our new_http_method, marked
// credentialed when a credentialed pattern covers the host.
func TestCredentialedPatternNewMethod(t *testing.T) {
	cur := parse(t, credCurrent)
	prop := cur.Clone()
	ep := prop.NetworkPolicies["github"].Endpoints[0]
	ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "PUT", Path: "/repos/acme/app/contents/README.md"}})
	for _, cred := range []string{"*.github.com", "**.github.com", "api.github.com"} {
		opts := Options{Credentialed: []HostPort{{cred, 443}}}
		rep := prove(t, cur, prop, opts)
		checkCredentialed(t, cur, prop, opts, rep)
		k := kinds(rep)
		if len(rep.Findings) != 1 || len(k[NewHTTPMethod]) != 1 || !k[NewHTTPMethod][0].Credentialed {
			t.Fatalf("%s: want one credentialed new_http_method:%s", cred, show(rep.Findings))
		}
		if r := k[NewHTTPMethod][0].Counterexample; r.HTTPMethod != "PUT" || r.Host != "api.github.com" {
			t.Fatalf("%s: counterexample %s", cred, describe(*r))
		}
	}
	// A pattern that does not cover api.github.com leaves it unmarked.
	rep := prove(t, cur, prop, Options{Credentialed: []HostPort{{"*.api.github.com", 443}}})
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != NewHTTPMethod || rep.Findings[0].Credentialed {
		t.Fatalf("want one unmarked new_http_method:%s", show(rep.Findings))
	}
}

// l7_bypass_credentialed follows patterns: git, ssh and nc gaining reach to
// a host a credentialed pattern covers, by an exact binary or a glob.
func TestL7BypassCredentialedPatterns(t *testing.T) {
	empty := parse(t, "version: 1\n")
	for _, c := range []struct {
		bin, host, cred string
		want            bool
	}{
		{"/usr/bin/git", "github.com", "**.github.com", false}, // ** needs a label before github.com
		{"/usr/bin/git", "api.github.com", "**.github.com", true},
		{"/usr/bin/git", "*.github.com", "api.github.com", true},
		{"/usr/bin/ssh", "*.github.com", "*.github.com", true},
		{"/usr/bin/nc", "**.github.com", "*.github.com", true},
		{"/usr/bin/*", "*.github.com", "*.github.com", true},
		{"/usr/bin/curl", "*.github.com", "*.github.com", false},
		{"/usr/bin/git", "*.gitlab.com", "*.github.com", false},
	} {
		prop := withEntry(empty, c.bin, c.host, 443)
		opts := Options{Credentialed: []HostPort{{c.cred, 443}}}
		rep := prove(t, empty, prop, opts)
		checkCredentialed(t, empty, prop, opts, rep)
		k := kinds(rep)
		if got := len(k[L7BypassCredentialed]) > 0; got != c.want {
			t.Fatalf("%s → %s, credentialed %s: l7_bypass_credentialed %v, want %v:%s", c.bin, c.host, c.cred, got, c.want, show(rep.Findings))
		}
		for _, f := range k[L7BypassCredentialed] {
			r := f.Counterexample
			if L7Bypass[r.Binary] == "" || !f.Credentialed || !(HostPort{c.cred, 443}).Covers(r.Host, r.Port) {
				t.Fatalf("l7_bypass_credentialed counterexample %s", describe(*r))
			}
		}
	}
}

func TestHostPortCovers(t *testing.T) {
	for _, c := range []struct {
		pattern, host string
		want          bool
	}{
		{"api.github.com", "API.GitHub.com.", true},
		{"API.GITHUB.COM.", "api.github.com", true},
		{"api.github.com", "uploads.github.com", false},
		{"*.github.com", "api.github.com", true},
		{"*.github.com", "github.com", false},
		{"*.github.com", "deep.api.github.com", false},
		{"api-*.github.com", "api-v3.github.com", true},
		{"api-*.github.com", "uploads.github.com", false},
		{"api.*.github.com", "api.v3.github.com", true},
		{"api.*.github.com", "api.v3.gitlab.com", false},
		{"*.s3.*.amazonaws.com", "bucket.s3.us-east-1.amazonaws.com", true},
		{"*.s3.*.amazonaws.com", "bucket.s3.dualstack.us-east-1.amazonaws.com", false},
		{"s3.*.amazonaws.com", "s3.eu-west-1.amazonaws.com", true},
		{"s3.*.amazonaws.com", "s3.amazonaws.com", false},
		{"**.github.com", "api.github.com", true},
		{"**.github.com", "deep.api.github.com", true},
		{"**.github.com", "github.com", false},
		{"93.184.216.34", "93.184.216.34", true},
		{"93.184.216.34", "0x5db8d822", true}, // another spelling of the address
		{"93.184.216.34", "93.184.216.35", false},
		{"2606:4700::1111", "[2606:4700:0::1111]", true},
		{"*.github.com", "93.184.216.34", false},
		{"*.github.com", "", false},
	} {
		if got := (HostPort{c.pattern, 443}).Covers(c.host, 443); got != c.want {
			t.Errorf("HostPort{%q, 443}.Covers(%q, 443) = %v, want %v", c.pattern, c.host, got, c.want)
		}
		if (HostPort{c.pattern, 443}).Covers(c.host, 8443) {
			t.Errorf("HostPort{%q, 443}.Covers(%q, 8443): another port", c.pattern, c.host)
		}
	}
}

func TestParseHostPattern(t *testing.T) {
	for in, want := range map[string]HostPort{
		"api.github.com:443":              {"api.github.com", 443},
		"*.GitHub.com.:443":               {"*.github.com", 443},
		"**.example.com:8443":             {"**.example.com", 8443},
		"*-aiplatform.googleapis.com:443": {"*-aiplatform.googleapis.com", 443},
		"[2606:4700::1111]:443":           {"2606:4700::1111", 443},
	} {
		got, err := ParseHostPattern(in)
		if err != nil || got != want {
			t.Errorf("ParseHostPattern(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"*.com:443", "*:443", "api.*:443", "foo.us-*.x.com:443", "api.github.com", "api.github.com:0", "api.github.com:99999", ":443", "a/b.com:443"} {
		if got, err := ParseHostPattern(in); err == nil {
			t.Errorf("ParseHostPattern(%q) = %+v, want an error", in, got)
		}
	}
	// ParseHostPort (`sandbox credentials`) still takes exact hosts only.
	for _, in := range []string{"*.github.com:443", "**.example.com:443", "*-x.googleapis.com:443"} {
		if got, err := ParseHostPort(in); err == nil || !strings.Contains(err.Error(), "exact") {
			t.Errorf("ParseHostPort(%q) = %+v, %v; want the exact-host error", in, got, err)
		}
	}
}
