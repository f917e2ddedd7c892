package policy

import "testing"

// Whole-label wildcards after the first label (OpenShell's
// `*.s3.*.amazonaws.com`), and the stricter limits kept here.
func TestValidHostPatternMiddleLabel(t *testing.T) {
	valid := []string{
		"*.s3.*.amazonaws.com", "foo.*.example.com", "bucket.*.*.amazonaws.com", "**.s3.*.amazonaws.com",
		"*.*.example.com", "*-ai.*.googleapis.com",
	}
	for _, p := range valid {
		if err := ValidHostPattern(p); err != nil {
			t.Errorf("ValidHostPattern(%q) = %v, want nil", p, err)
		}
	}
	invalid := []string{
		"foo.us-*.example.com", // partial later label (OpenShell refuses it too)
		"foo.*x.example.com",
		"a.**.example.com", // ** only as the whole first label
		"api.example.*",    // last-label wildcard (OpenShell accepts it)
		"*.*.com",          // one literal label after the last wildcard (OpenShell accepts it)
		"foo.*.com",
		"*.s3.*.com",
	}
	for _, p := range invalid {
		if err := ValidHostPattern(p); err == nil {
			t.Errorf("ValidHostPattern(%q) = nil, want an error", p)
		}
	}
}

func TestMatchHostMiddleLabel(t *testing.T) {
	tests := []struct {
		pattern, host string
		want          bool
	}{
		{"*.s3.*.amazonaws.com", "bucket.s3.us-east-1.amazonaws.com", true},
		{"*.s3.*.amazonaws.com", "BUCKET.S3.eu-west-1.AmazonAWS.com.", true},
		{"*.s3.*.amazonaws.com", "bucket.s3.amazonaws.com", false},           // * is exactly one label
		{"*.s3.*.amazonaws.com", "bucket.s3.a.b.amazonaws.com", false},       // never two
		{"*.s3.*.amazonaws.com", "bucket.s3..amazonaws.com", false},          // never empty
		{"*.s3.*.amazonaws.com", "a.b.s3.us-east-1.amazonaws.com", false},    // first * is one label
		{"*.s3.*.amazonaws.com", "bucket.s4.us-east-1.amazonaws.com", false}, // literal labels stay literal
		{"**.s3.*.amazonaws.com", "a.b.s3.us-east-1.amazonaws.com", true},    // ** is one or more labels
		{"**.s3.*.amazonaws.com", "s3.us-east-1.amazonaws.com", false},
		{"foo.*.example.com", "foo.bar.example.com", true},
		{"foo.*.example.com", "foo.example.com", false},
		{"*-ai.*.googleapis.com", "us-ai.x.googleapis.com", true},
		{"*-ai.*.googleapis.com", "us-ai.x.y.googleapis.com", false},
	}
	for _, tt := range tests {
		if got := MatchHost(tt.pattern, tt.host); got != tt.want {
			t.Errorf("MatchHost(%q, %q) = %v, want %v", tt.pattern, tt.host, got, tt.want)
		}
	}
}

// A wildcard matches host-name labels only: NUL, '*', '/', '%', spaces,
// '@' and non-ASCII bytes in the part a wildcard would cover match
// nothing, whatever the wildcard.
func TestMatchHostAlphabet(t *testing.T) {
	pats := []string{"*.example.com", "**.example.com", "a*.example.com", "foo.*.example.com"}
	for _, label := range []string{"a\x00b", "a*", "*", "a/b", "a%00", "a b", "a@b", "é", "a\tb", "a\nb", "a:1", "a\\b"} {
		for _, p := range pats {
			host := label + ".example.com"
			if p == "foo.*.example.com" {
				host = "foo." + label + ".example.com"
			}
			if MatchHost(p, host) {
				t.Errorf("MatchHost(%q, %q) = true, want false", p, host)
			}
		}
	}
	for _, h := range []string{"api.example.com", "_dmarc.example.com", "a-b.example.com", "API.example.com."} {
		if !ValidHostName(h) {
			t.Errorf("ValidHostName(%q) = false", h)
		}
	}
	for _, h := range []string{"", ".", "a..b", ".a", "a\x00.b", "*.example.com", "a b.com", "é.com", "a/b", strings63x5()} {
		if ValidHostName(h) {
			t.Errorf("ValidHostName(%q) = true", h)
		}
	}
}

func strings63x5() string {
	s := ""
	for i := 0; i < 5; i++ {
		s += "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."
	}
	return s + "com"
}
