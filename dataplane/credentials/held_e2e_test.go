package credentials_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/provider"
)

// waitSpans waits until the proxy ended a request's span (it ends after
// the answer is sent), so that the log check sees it.
func (e *env) waitSpans(t *testing.T) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for len(e.spans.Ended()) == 0 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("no request span ended")
		}
	}
}

type answer struct {
	status int
	body   map[string]any
}

// A held call is forwarded with the credentials held when it is
// approved, not those of when it was held: a provider rotated while the
// call waits sends the new value; one detached refuses the call, nothing
// forwarded.
func TestHeldCallUsesCredentialsAtApproval(t *testing.T) {
	const rotated = "ghp_rotated_SECRET_0009"
	for _, tc := range []struct {
		name   string
		change func(b *provider.Bundle)
	}{
		{"rotated", func(b *provider.Bundle) {
			b.Providers[0].Revision, b.Providers[0].Secret[provider.FieldToken] = 2, rotated
		}},
		{"detached", func(b *provider.Bundle) { b.Providers = b.Providers[1:] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rv := dataplanetest.NewReviewer()
			e := newEnv(t, func(c *dataplane.Config) { c.Hold.Filer = rv })
			e.agent.Credentials().SetCredentials(e.bundle())
			done := make(chan answer, 1)
			go func() {
				status, body := e.do(t, "POST", e.url("heldbound.example.com", false, "/pay"), http.Header{"Content-Type": {"application/json"}}, `{"amount":12}`)
				done <- answer{status, body}
			}()
			r := rv.Next(t)
			b := e.bundle()
			b.Generation = 2
			tc.change(b)
			e.agent.Credentials().SetCredentials(b)
			r.File(7)
			r.Decide(7, "approved")
			a := <-done
			got := e.plain.take()
			e.waitSpans(t)
			if tc.name == "detached" {
				if a.status != http.StatusForbidden || a.body["reason_code"] != "credential_unavailable" || len(got) != 0 {
					t.Fatalf("detached while held: %d %v, upstream got %d requests; want credential_unavailable and nothing forwarded", a.status, a.body, len(got))
				}
				return
			}
			if a.status != http.StatusOK || len(got) != 1 {
				t.Fatalf("rotated while held: %d %v, upstream got %d requests", a.status, a.body, len(got))
			}
			if v := got[0].req.Header.Get("Authorization"); v != "Bearer "+rotated {
				t.Errorf("the upstream got Authorization %q, want the rotated token", v)
			}
		})
	}
}
