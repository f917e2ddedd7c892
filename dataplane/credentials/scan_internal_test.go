package credentials

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/provider"
)

func TestCheckPlaceholders(t *testing.T) {
	for _, tc := range []struct {
		s, bound string
		denied   bool
	}{
		{"Bearer portcullis:provider:gh", "gh", false},
		{"Bearer portcullis:provider:gh", "", true},
		{"portcullis:provider:gh and portcullis:provider:gh", "gh", false},
		{"portcullis:provider:gh and portcullis:provider:key", "gh", true},
		{"portcullis:provider:gh-2", "gh", true}, // a longer name is another provider
		{"portcullis:provider:", "gh", true},     // malformed is still one
		{"no placeholder here", "", false},
		{"portcullis:provider", "", false},
	} {
		if d := checkPlaceholders("x", tc.s, tc.bound); (d != nil) != tc.denied || d != nil && d.Code != CodePlaceholder {
			t.Errorf("checkPlaceholders(%q, bound %q) = %v, want denied %v", tc.s, tc.bound, d, tc.denied)
		}
	}
}

// Any text holding the prefix is refused when nothing is bound; text
// without it never is.
func FuzzCheckPlaceholders(f *testing.F) {
	f.Add("Bearer portcullis:provider:gh", "gh")
	f.Add("x portcullis:provider:a portcullis:provider:b", "a")
	f.Fuzz(func(t *testing.T, s, bound string) {
		d := checkPlaceholders("x", s, bound)
		has := strings.Contains(s, provider.PlaceholderPrefix)
		if !has && d != nil {
			t.Fatalf("denied %q without a placeholder", s)
		}
		if has && bound == "" && d == nil {
			t.Fatalf("allowed %q with nothing bound", s)
		}
	})
}

func TestAWSPlaceholder(t *testing.T) {
	p := provider.Placeholder("aw")
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"AWS4-HMAC-SHA256 Credential=portcullis:provider:aw/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00", true},
		{"AWS4-HMAC-SHA256 SignedHeaders=host,Credential=portcullis:provider:aw/x", true},
		{"AWS4-HMAC-SHA256 Credential=AKIAREALKEY/20260101/us-east-1/s3/aws4_request", false},
		{"AWS4-HMAC-SHA256 Credential=portcullis:provider:aws/x", false},
		{"Bearer portcullis:provider:aw", false},
		{"", false},
	} {
		if got := awsPlaceholder(tc.v, p); got != tc.ok {
			t.Errorf("awsPlaceholder(%q) = %v, want %v", tc.v, got, tc.ok)
		}
	}
}

func TestBasicPlaceholder(t *testing.T) {
	r := &http.Request{Header: http.Header{}}
	r.SetBasicAuth("robot", "portcullis:provider:bas")
	withPlaceholder := r.Header.Get("Authorization")
	r.SetBasicAuth("robot", "hunter2")
	withPassword := r.Header.Get("Authorization")
	if !basicPlaceholder(withPlaceholder, provider.Placeholder("bas")) || basicPlaceholder(withPassword, provider.Placeholder("bas")) || basicPlaceholder("Basic !!!", provider.Placeholder("bas")) {
		t.Error("basicPlaceholder takes only a Basic value whose password is the placeholder")
	}
}

func TestRegionOf(t *testing.T) {
	for host, want := range map[string]string{
		"bedrock-runtime.us-east-1.amazonaws.com":     "us-east-1",
		"bucket.s3.dualstack.eu-west-2.amazonaws.com": "eu-west-2",
		"sts.us-gov-west-1.amazonaws.com":             "us-gov-west-1",
		"s3.cn-north-1.amazonaws.com.cn":              "cn-north-1",
		"sts.amazonaws.com":                           "",
		"vpce-123.example.com":                        "",
	} {
		if got := regionOf(host); got != want {
			t.Errorf("regionOf(%q) = %q, want %q", host, got, want)
		}
	}
}

func TestSignsBody(t *testing.T) {
	req := func(sha string, length int64, chunked bool) *http.Request {
		r := &http.Request{Header: http.Header{}, ContentLength: length}
		if sha != "" {
			r.Header.Set("X-Amz-Content-Sha256", sha)
		}
		if chunked {
			r.TransferEncoding = []string{"chunked"}
		}
		return r
	}
	for _, tc := range []struct {
		name string
		mode string
		r    *http.Request
		want bool
	}{
		{"body mode", "sigv4:body", req("UNSIGNED-PAYLOAD", -1, true), true},
		{"no_body mode", "sigv4:no_body", req("abc", 10, false), false},
		{"auto, a hash", "sigv4", req("ab12", 10, false), true},
		{"auto, unsigned", "sigv4", req("UNSIGNED-PAYLOAD", 10, false), false},
		{"auto, streaming", "sigv4", req("STREAMING-UNSIGNED-PAYLOAD-TRAILER", 10, false), false},
		{"auto, no header, a length", "sigv4", req("", 10, false), true},
		{"auto, no header, chunked", "sigv4", req("", -1, true), false},
	} {
		if got := signsBody(tc.mode, tc.r); got != tc.want {
			t.Errorf("%s: signsBody = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Judging a request that holds no placeholder, to an endpoint binding
// nothing, allocates nothing: it is every request's cost.
func TestCheckUnboundCostsNothing(t *testing.T) {
	h := New(Config{Logger: slog.New(slog.DiscardHandler)})
	h.SetCredentials(&provider.Bundle{Providers: []provider.Provider{{Spec: provider.Spec{Name: "gh", Type: provider.TypeBearer, Hosts: []string{"api.example.com"}}, Secret: map[string]string{provider.FieldToken: "ghp_0123456789"}}}})
	r, err := http.NewRequest("GET", "http://api.example.com/x?q=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.RequestURI = "/x?q=1"
	r.Header.Set("Accept", "application/json")
	r.Header.Set("User-Agent", "agent/1")
	allocs := testing.AllocsPerRun(100, func() {
		if plan, body, d := h.Check(t.Context(), nil, r, Request{Host: "api.example.com", Port: 443}); plan != nil || body != nil || d != nil {
			t.Fatalf("Check = %v %v %v", plan, body, d)
		}
	})
	if allocs != 0 {
		t.Errorf("Check of an unbound request allocates %v times", allocs)
	}
}
