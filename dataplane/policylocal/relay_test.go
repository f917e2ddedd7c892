package policylocal

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Every AdvisorService error maps to an HTTP status with a JSON body that
// carries the details. The dataplane tests see the ones a real gateway
// gives (refused, not found, frozen, gone) through a real proxy; this is
// the whole table, including the codes a healthy test gateway never
// answers.
func TestRelayErrorMapping(t *testing.T) {
	pl := New(Config{Logger: slog.New(slog.DiscardHandler)})
	withDetail := func(code codes.Code, msg string, detail *portcullisv1.ProposalRefusal, rl *portcullisv1.ProposalRateLimit) error {
		st := status.New(code, msg)
		var err error
		if detail != nil {
			st, err = st.WithDetails(detail)
		}
		if rl != nil {
			st, err = st.WithDetails(rl)
		}
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	refusal := &portcullisv1.ProposalRefusal{Operation: 0, Field: "operations[0].add_rule.rule.endpoints[0].host", Rule: "public_suffix_wildcard", Reason: "*.github.io is below a public suffix"}
	for _, tc := range []struct {
		name   string
		err    error
		status int
		check  func(http.Header, map[string]any) bool
	}{
		{"refused", withDetail(codes.InvalidArgument, "proposal refused: *.github.io is below a public suffix", refusal, nil), 400, func(_ http.Header, b map[string]any) bool {
			r, _ := b["refusal"].(map[string]any)
			return strings.Contains(b["error"].(string), "github.io") && r["rule"] == "public_suffix_wildcard" && r["field"] == refusal.Field && r["operation"] == float64(0) && r["reason"] == refusal.Reason
		}},
		{"rate limited", withDetail(codes.ResourceExhausted, "too many proposals", nil, &portcullisv1.ProposalRateLimit{RetryAfterSeconds: 42}), 429, func(h http.Header, b map[string]any) bool {
			return h.Get("Retry-After") == "42" && b["retry_after_seconds"] == float64(42)
		}},
		{"not found", status.Error(codes.NotFound, "denial dn_x not found"), 404, func(_ http.Header, b map[string]any) bool {
			return strings.Contains(b["error"].(string), "dn_x")
		}},
		{"frozen", status.Error(codes.FailedPrecondition, "the sandbox is frozen"), 409, func(_ http.Header, b map[string]any) bool { return b["code"] == "conflict" }},
		{"token revoked", status.Error(codes.Unauthenticated, "token revoked"), 502, func(_ http.Header, b map[string]any) bool {
			return b["code"] == "proxy_token_refused" && strings.Contains(b["error"].(string), "proxy's sandbox token")
		}},
		{"wrong role", status.Error(codes.PermissionDenied, "not a sandbox token"), 502, func(_ http.Header, b map[string]any) bool { return b["code"] == "proxy_token_refused" }},
		{"unavailable", status.Error(codes.Unavailable, "draining"), 503, func(_ http.Header, b map[string]any) bool { return b["code"] == "gateway_unavailable" }},
		{"internal", status.Error(codes.Internal, "boom"), 502, func(_ http.Header, b map[string]any) bool { return b["code"] == "gateway_error" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeErrorBody(rec, pl.relayError(tc.err))
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body.Bytes(), err)
			}
			if rec.Code != tc.status || !tc.check(rec.Header(), body) {
				t.Errorf("answer = %d %v %v; want %d", rec.Code, rec.Header(), body, tc.status)
			}
		})
	}
}
