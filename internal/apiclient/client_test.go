package apiclient

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connectproto"
	"google.golang.org/protobuf/proto"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func TestParseURLs(t *testing.T) {
	for _, tt := range []struct {
		list, want, err string
	}{
		{"http://127.0.0.1:7070", "http://127.0.0.1:7070", ""},
		{" https://a:7070 , ,http://b:7070/ ", "https://a:7070 http://b:7070/", ""},
		{"ftp://a", "", `"ftp://a" is not an http:// or https:// URL`},
		{"http://", "", `"http:" is not an http:// or https:// URL`},
		{"http://u:secret@a:7070,a.example", "", `"a.example" is not an http:// or https:// URL`},
		{"http://u:secret@[::1", "", `"…@[::1" is not an http:// or https:// URL`},
		{" , ", "", "no URL"},
	} {
		urls, err := ParseURLs(tt.list)
		var got []string
		for _, u := range urls {
			got = append(got, u.String())
		}
		if errText(err) != tt.err || strings.Join(got, " ") != tt.want {
			t.Errorf("ParseURLs(%q) = %q, %v; want %q, %q", tt.list, got, err, tt.want, tt.err)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Of several replicas, the first that accepts a connection; the first
// when none does.
func TestPick(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	down, _ := url.Parse("http://" + closed.Addr().String())
	up, _ := url.Parse("http://" + ln.Addr().String())
	if got := Pick([]*url.URL{down, up}); got != up {
		t.Errorf("Pick(down, up) = %s, want %s", got, up)
	}
	if got := Pick([]*url.URL{down, down}); got != down {
		t.Errorf("Pick(down, down) = %s, want the first", got)
	}
}

// An answer no gateway gives (a web server's 404 page) is noted, with the
// URL redacted; a proxy's 503 is a gateway that is down, not a wrong
// address. The token goes as the bearer, the URL's credentials nowhere.
func TestNotGateway(t *testing.T) {
	var auth []string
	status := http.StatusNotFound
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("u", "secret")

	c := New(Config{URL: u, Token: "tok", Timeout: 5 * time.Second})
	defer c.CloseIdleConnections()
	status = http.StatusServiceUnavailable
	if _, err := c.Sandbox.ListSandboxes(t.Context(), &portcullisv1.ListSandboxesRequest{}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("503: %v, want unavailable", err)
	}
	if ng := c.NotGateway(); ng != nil {
		t.Errorf("503 noted as not a gateway: %v", ng)
	}
	status = http.StatusNotFound
	if _, err := c.Sandbox.ListSandboxes(t.Context(), &portcullisv1.ListSandboxesRequest{}); err == nil {
		t.Fatal("a 404 page answered the call")
	}
	want := "http://u:xxxxx@" + u.Host + " is not a Portcullis gateway: it answered 404 Not Found to an API call"
	if ng := c.NotGateway(); ng == nil || ng.Error() != want {
		t.Errorf("NotGateway() = %v, want %q", ng, want)
	}
	for _, a := range auth {
		if a != "Bearer tok" {
			t.Errorf("Authorization %q, want the bearer token alone", a)
		}
	}
}

// A refusal or a rate limit the gateway's details carry becomes its typed
// error, only under the code that goes with it; anything else is left as
// it is.
func TestProposalError(t *testing.T) {
	withDetail := func(code connect.Code, m proto.Message) error {
		t.Helper()
		d, err := connectproto.NewErrorDetail(m)
		if err != nil {
			t.Fatal(err)
		}
		return connect.NewError(code, "no").WithDetail(d)
	}
	refusal := &portcullisv1.ProposalRefusal{Operation: 0, Field: "host", Rule: "public_suffix", Reason: "r"}
	if re, ok := errors.AsType[*RefusalError](ProposalError(withDetail(connect.CodeInvalidArgument, refusal))); !ok || len(re.Refusals) != 1 {
		t.Errorf("a refusal: %v", re)
	}
	if rl, ok := errors.AsType[*RateLimitError](ProposalError(withDetail(connect.CodeResourceExhausted, &portcullisv1.ProposalRateLimit{RetryAfterSeconds: 30}))); !ok || rl.RetryAfterSeconds != 30 {
		t.Errorf("a rate limit: %v", rl)
	}
	for _, err := range []error{
		withDetail(connect.CodeInternal, refusal),
		withDetail(connect.CodeUnavailable, &portcullisv1.ProposalRateLimit{RetryAfterSeconds: 30}),
		connect.NewError(connect.CodeNotFound, "no denial"),
		errors.New("not an RPC error"),
	} {
		if got := ProposalError(err); got != err {
			t.Errorf("ProposalError(%v) = %v, want it unchanged", err, got)
		}
	}
}

// Problems reads the validation problems of an error's details.
func TestProblems(t *testing.T) {
	d, err := connectproto.NewErrorDetail(&portcullisv1.ValidationProblems{Problems: []*portcullisv1.Problem{{Path: "a", Message: "b"}, {Message: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	ce := connect.NewError(connect.CodeInvalidArgument, "invalid").WithDetail(d)
	if got := Problems(ce); len(got) != 2 || got[0].GetPath() != "a" || got[1].GetMessage() != "c" {
		t.Errorf("Problems = %v", got)
	}
}
