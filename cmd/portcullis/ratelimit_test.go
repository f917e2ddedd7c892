package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func rateLimitedRecord(id string) *portcullisv1.DecisionRecord {
	return &portcullisv1.DecisionRecord{
		Time: timestamppb.New(logsT0.Add(2 * time.Second)), Decision: "rate_limited", Binary: "/usr/bin/python3",
		Host: "orders.example.com", Port: 443, HttpMethod: "POST", Path: "/mcp",
		McpMethod: "tools/call", Tool: "lookup_order", Entry: "orders", Rule: "rules[3]",
		Reason:        "tools/call lookup_order is over the rate_limit of rules[3] of network_policies.orders (orders.example.com:443/mcp): 6/min, burst 3; retry after 10 s",
		PolicyVersion: "1", DenialId: id,
	}
}

// A rate_limited record in `portcullis logs`, and `propose --from-denial`
// refusing it by name (exit 2), with nothing stored.
func TestLogsAndProposeRateLimited(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sb := jsonOut(t, gw, admin, "sandbox", "create", "orders", "-f", ordersV1File)["token"].(string)
	shipRecords(t, gw, sb, denyRecord("dn_first"), rateLimitedRecord("dn_limited"))

	stdout, stderr, code := cliAgainst(t, gw, admin, "logs", "orders", "--decision", "rate_limited")
	ok(t, code, stderr)
	want := `2026-03-04T05:06:09Z rate_limited /usr/bin/python3 POST orders.example.com:443/mcp mcp=tools/call tool=lookup_order ` +
		`reason="tools/call lookup_order is over the rate_limit of rules[3] of network_policies.orders (orders.example.com:443/mcp): 6/min, burst 3; retry after 10 s" ` +
		`policy=1 denial_id=dn_limited`
	if got := lines(stdout); len(got) != 1 || got[0] != want {
		t.Errorf("logs --decision rate_limited:\n got %s\nwant %s", stdout, want)
	}
	stdout, stderr, code = cliAgainst(t, gw, admin, "logs", "orders", "--decision", "deny")
	ok(t, code, stderr)
	if got := lines(stdout); len(got) != 1 || !strings.HasSuffix(got[0], "denial_id=dn_first") {
		t.Errorf("logs --decision deny lists the rate_limited record:\n%s", stdout)
	}

	_, stderr, code = cliAgainst(t, gw, sb, "propose", "--from-denial", "dn_limited", "--rationale", "more calls")
	if code != exitInvalid || !strings.Contains(stderr, "not_offered") || !strings.Contains(stderr, "rate_limit") {
		t.Errorf("propose --from-denial of a rate_limited record: exit %d, stderr %s; want 2 naming the rate_limit", code, stderr)
	}
	if n := proposalCount(t, gw, sb); n != 0 {
		t.Errorf("%d proposals stored, want none", n)
	}
}
