package gateway

import (
	"net/http"
	"testing"
)

func TestCSRFToken(t *testing.T) {
	a, b := CSRFToken("pcs_a"), CSRFToken("pcs_b")
	if a == b || len(a) != 64 || a != CSRFToken("pcs_a") {
		t.Errorf("CSRFToken: %q, %q: want a stable 64-hex-digit HMAC per session", a, b)
	}
	for _, tc := range []struct {
		got  string
		want bool
	}{
		{a, true},
		{b, false},
		{"", false},
		{a[:63], false},
		{"pcs_a", false}, // the token itself is not its CSRF token
	} {
		if ok := validCSRF("pcs_a", tc.got); ok != tc.want {
			t.Errorf("validCSRF(%q) = %v, want %v", tc.got, ok, tc.want)
		}
	}
}

func TestSessionToken(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cookies []string
		want    string
	}{
		{"none", nil, ""},
		{"only", []string{"portcullis_session=pcs_x"}, "pcs_x"},
		{"among others", []string{"a=1; portcullis_session=pcs_x; b=2"}, "pcs_x"},
		// Another application on the same host sets a malformed cookie.
		{"beside a malformed cookie", []string{`bad"name=1; portcullis_session=pcs_x`}, "pcs_x"},
		{"second header line", []string{"a=1", "portcullis_session=pcs_x"}, "pcs_x"},
		{"empty value", []string{"portcullis_session="}, ""},
		{"other name", []string{"portcullis_sessions=pcs_x"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Cookie": tc.cookies}
			got, ok := sessionToken(h)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("sessionToken(%q) = %q, %v; want %q", tc.cookies, got, ok, tc.want)
			}
		})
	}
}

func TestCookieSafe(t *testing.T) {
	for tok, want := range map[string]bool{
		"pcs_abcDEF-_0123456789": true,
		"":                       false,
		"pcs with space":         false,
		"pcs;x":                  false,
		`pcs"x`:                  false,
		`pcs\x`:                  false,
		"pcs,x":                  false,
		"pcs\x7fx":               false,
		"pcsé":                   false,
	} {
		if got := cookieSafe(tok); got != want {
			t.Errorf("cookieSafe(%q) = %v, want %v", tok, got, want)
		}
	}
}
