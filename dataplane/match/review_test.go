package match

import (
	"os"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// TestReviewedAllows: the matcher marks reviewed allows as policy.Decide
// does — the deciding rule's timeout, an unreviewed allow winning, audit
// never lifting a review.
func TestReviewedAllows(t *testing.T) {
	doc, err := os.ReadFile("testdata/reviewed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := mustCompile(t, parse(t, string(doc)))
	call := func(tool, args string) policy.Request {
		r := mcpCall(tool, args)
		r.MCP.ProtocolVersion = policy.DefaultMCPVersion
		return r
	}
	rest := func(host, method, path string) policy.Request {
		return policy.Request{Binary: python, Host: host, Port: 443, Addr: pubIP, HTTPMethod: method, Path: path, Time: when}
	}
	tests := []struct {
		name   string
		r      policy.Request
		rule   string
		review time.Duration
	}{
		{"reviewed tool", call("refund_order", `{"amount":9}`), "rules[0]", 5 * time.Minute},
		{"the arguments a later rule admits without review", call("refund_order", `{"amount":5}`), "rules[1]", 0},
		{"default timeout", call("delete_order", `{}`), "rules[2]", policy.DefaultReviewTimeout},
		{"the first reviewed rule decides", call("send_mail", `{}`), "rules[2]", policy.DefaultReviewTimeout},
		{"rest reviewed", rest("api.example.com", "POST", "/payouts/big"), "rules[0]", time.Minute},
		{"rest: a later unreviewed rule wins", rest("api.example.com", "POST", "/payouts/small"), "rules[1]", 0},
		{"audit keeps the review", rest("audit.example.com", "POST", "/pay/blocked"), "deny_rules[0]", 3 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := agree(t, m, tc.r)
			if !d.Allow || d.Rule != tc.rule || d.Review != tc.review {
				t.Errorf("Decide = %+v, want allowed by %s with review %v", d, tc.rule, tc.review)
			}
		})
	}
}
