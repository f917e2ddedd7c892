package provider

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	ok := Spec{Name: "github", Type: TypeBearer, Hosts: []string{"api.github.com", "*.githubusercontent.com:443"}}
	if err := Check(ok, map[string][]byte{FieldToken: []byte("ghp_x")}); err != nil {
		t.Fatalf("valid bearer provider: %v", err)
	}
	cases := []struct {
		spec   Spec
		secret map[string][]byte
		field  string
	}{
		{Spec{Name: "Bad Name", Type: TypeBearer, Hosts: ok.Hosts}, map[string][]byte{FieldToken: []byte("x")}, "name"},
		{Spec{Name: "a", Type: "kerberos", Hosts: ok.Hosts}, nil, "type"},
		{Spec{Name: "a", Type: TypeBearer}, nil, "hosts"},
		{Spec{Name: "a", Type: TypeBearer, Hosts: []string{"*"}}, nil, "hosts[0]"},
		{Spec{Name: "a", Type: TypeBearer, Hosts: []string{"169.254.169.254"}}, nil, "hosts[0]"},
		{Spec{Name: "a", Type: TypeBearer, Hosts: []string{"x.example.com:0"}}, nil, "hosts[0]"},
		{Spec{Name: "a", Type: TypeBearer, Hosts: ok.Hosts}, map[string][]byte{}, "secret.token"},
		{Spec{Name: "a", Type: TypeBearer, Hosts: ok.Hosts}, map[string][]byte{FieldToken: []byte("a\nb")}, "secret.token"},
		{Spec{Name: "a", Type: TypeBearer, Hosts: ok.Hosts}, map[string][]byte{FieldToken: []byte("t"), "password": []byte("p")}, "secret"},
		{Spec{Name: "a", Type: TypeBearer, Hosts: ok.Hosts}, map[string][]byte{FieldToken: []byte(Placeholder("a"))}, "secret.token"},
		{Spec{Name: "a", Type: TypeHeader, Hosts: ok.Hosts}, map[string][]byte{FieldValue: []byte("v")}, "settings.header"},
		{Spec{Name: "a", Type: TypeHeader, Hosts: ok.Hosts, Settings: map[string]string{"header": "Host"}}, nil, "settings.header"},
		{Spec{Name: "a", Type: TypeBearer, Hosts: ok.Hosts, Settings: map[string]string{"username": "u"}}, nil, "settings.username"},
		{Spec{Name: "a", Type: TypeOAuth2ClientCredentials, Hosts: ok.Hosts, Settings: map[string]string{"token_url": "ftp://x"}}, nil, "settings.token_url"},
		{Spec{Name: "a", Type: TypeTokenExchange, Hosts: ok.Hosts, Settings: map[string]string{"token_url": "https://sts.example.com/token"}},
			map[string][]byte{FieldSubjectToken: []byte("s"), FieldClientID: []byte("c")}, "secret.client_secret"},
	}
	for _, c := range cases {
		err := Check(c.spec, c.secret)
		var ps Problems
		if !errors.As(err, &ps) {
			t.Errorf("%+v: want problems at %s, got %v", c.spec, c.field, err)
			continue
		}
		found := false
		for _, p := range ps {
			found = found || p.Field == c.field
		}
		if !found {
			t.Errorf("%+v: want a problem at %s, got %v", c.spec, c.field, ps)
		}
	}
}

// TestCheckNeverNamesAnUnknownField: a secret read as a field's name
// (FIELD=VALUE split at a base64 value's padding) is counted, never
// quoted.
func TestCheckNeverNamesAnUnknownField(t *testing.T) {
	const leak = "c2VjcmV0LWNsaWVudC1zZWNyZXQtdmFsdWU"
	spec := Spec{Name: "crm", Type: TypeOAuth2ClientCredentials, Hosts: []string{"api.crm.example"},
		Settings: map[string]string{SettingTokenURL: "https://login.crm.example/token"}}
	err := Check(spec, map[string][]byte{FieldClientID: []byte("app"), leak: {}, "another" + leak: []byte("x")})
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Check = %v, want problems", err)
	}
	want := []Problem{
		{"secret", "has 2 field(s) type oauth2-client-credentials does not take (it takes: client_id, client_secret; a field's name is not shown, as it may be the secret)"},
		{"secret.client_secret", "is required for type oauth2-client-credentials"},
	}
	if len(ps) != len(want) || ps[0] != want[0] || ps[1] != want[1] {
		t.Errorf("Check = %q, want %q", ps, want)
	}
	if strings.Contains(err.Error(), leak[:8]) {
		t.Errorf("Check quotes the secret: %v", err)
	}
}

func TestCovers(t *testing.T) {
	hosts := []string{"api.github.com", "*.example.com:8443", "http://svc.internal", "HTTPS://tls.example.org:9443"}
	for _, c := range []struct {
		host string
		port int
		tls  bool
		want bool
	}{
		{"api.github.com", 443, true, true},
		{"API.GitHub.com.", 443, true, true},
		{"api.github.com", 443, false, false}, // plain HTTP to the TLS port: never
		{"api.github.com", 80, true, false},
		{"github.com", 443, true, false},
		{"a.example.com", 8443, true, true},
		{"a.example.com", 8443, false, false},
		{"a.example.com", 443, true, false},
		{"example.com", 8443, true, false},
		{"svc.internal", 80, false, true},
		{"svc.internal", 80, true, false}, // an http:// entry covers plain HTTP only
		{"svc.internal", 443, true, false},
		{"tls.example.org", 9443, true, true},
		{"tls.example.org", 9443, false, false},
	} {
		if got := Covers(hosts, c.host, c.port, c.tls); got != c.want {
			t.Errorf("Covers(%s:%d, tls %v) = %v, want %v", c.host, c.port, c.tls, got, c.want)
		}
	}
}

func TestParseHost(t *testing.T) {
	for in, want := range map[string]Host{
		"api.github.com":         {Pattern: "api.github.com", Port: 443},
		"https://api.github.com": {Pattern: "api.github.com", Port: 443},
		"http://127.0.0.1:8080":  {Pattern: "127.0.0.1", Port: 8080, Plain: true},
		"http://svc.internal":    {Pattern: "svc.internal", Port: 80, Plain: true},
		"HTTP://[::1]:9000":      {Pattern: "::1", Port: 9000, Plain: true},
		" *.example.com:8443 ":   {Pattern: "*.example.com", Port: 8443},
	} {
		got, err := ParseHost(in)
		if err != nil || got.Pattern != want.Pattern || got.Port != want.Port || got.Plain != want.Plain {
			t.Errorf("ParseHost(%q) = %+v, %v; want %+v", in, got, err, want)
			continue
		}
		if again, err := ParseHost(got.String()); err != nil || again != got {
			t.Errorf("ParseHost(%q) (its String) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
	for _, in := range []string{"ftp://x.example.com", "https://x.example.com/path", "http://x.example.com?q", "http://u@x.example.com", "http://", "x.example.com:0", "http://169.254.169.254"} {
		if h, err := ParseHost(in); err == nil {
			t.Errorf("ParseHost(%q) = %+v, want an error", in, h)
		}
	}
}

func TestFindPlaceholder(t *testing.T) {
	name, at, ok := FindPlaceholder("Bearer portcullis:provider:github-ci rest")
	if !ok || name != "github-ci" || at != 7 {
		t.Fatalf("got %q %d %v", name, at, ok)
	}
	if _, _, ok := FindPlaceholder("Bearer ghp_123"); ok {
		t.Fatal("found a placeholder in a token")
	}
	if name, at, ok := FindPlaceholder("x PORTCULLIS:Provider:gh"); !ok || at != 2 || name != "gh" {
		t.Fatalf("upper case: %q %d %v", name, at, ok)
	}
	if name, _, ok := FindPlaceholder("PORTCULLIS:PROVIDER:GH"); !ok || name != "" {
		t.Fatalf("upper-case name: %q %v, want found, its name malformed", name, ok)
	}
	if name, _, ok := FindPlaceholder("Portcullis:provider:gh"); !ok || name != "gh" {
		t.Fatalf("mixed case: %q %v", name, ok)
	}
	if IndexPlaceholder([]byte("portcullis\x1aprovider:")) >= 0 || IndexPlaceholder("portcullis:provide") >= 0 {
		t.Fatal("found a placeholder in what is not one")
	}
	if name, _, ok := FindPlaceholder("portcullis:provider:"); !ok || name != "" {
		t.Fatalf("a bare prefix: %q %v", name, ok)
	}
}

func TestSealOpen(t *testing.T) {
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b := &Bundle{Sandbox: "demo", Generation: 3, Providers: []Provider{{
		Spec: Spec{Name: "github", Type: TypeBearer, Hosts: []string{"api.github.com"}}, Revision: 2,
		Secret: map[string]string{FieldToken: "ghp_secret"},
	}}}
	enc, ct, err := Seal(k.Public(), "proxy-1", b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ct), "ghp_secret") {
		t.Fatal("the ciphertext holds the secret")
	}
	got, err := k.Open("demo", "proxy-1", 3, enc, ct)
	if err != nil {
		t.Fatal(err)
	}
	if got.Providers[0].Secret[FieldToken] != "ghp_secret" || got.Generation != 3 {
		t.Fatalf("opened %+v", got)
	}
	if _, err := k.Open("demo", "proxy-2", 3, enc, ct); err == nil {
		t.Fatal("a bundle sealed for proxy-1 opened for proxy-2")
	}
	if _, err := k.Open("demo", "proxy-1", 4, enc, ct); err == nil {
		t.Fatal("a bundle of generation 3 opened as generation 4")
	}
	other, _ := NewKey()
	if _, err := other.Open("demo", "proxy-1", 3, enc, ct); err == nil {
		t.Fatal("a bundle opened with another run's key")
	}
	ct[len(ct)-1] ^= 1
	if _, err := k.Open("demo", "proxy-1", 3, enc, ct); err == nil {
		t.Fatal("a tampered bundle opened")
	}
}
