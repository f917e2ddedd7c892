package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// shipRecords sends one batch of decision records with a sandbox token
// over stock grpc-go, as a proxy does, and waits for the gateway to store
// them.
func shipRecords(t *testing.T, gw *gatewaytest.Gateway, token string, records ...*portcullisv1.DecisionRecord) {
	t.Helper()
	c, ctx := grpcDistribution(t, gw, token)
	st, err := c.ShipDecisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: "p1", Records: records}); err != nil {
		t.Fatal(err)
	}
	res, err := st.CloseAndRecv()
	if err != nil {
		t.Fatalf("ShipDecisions: %v", err)
	}
	if res.GetStored() != uint64(len(records)) {
		t.Fatalf("stored %d records, want %d", res.GetStored(), len(records))
	}
}

var logsT0 = mustTime("2026-03-04T05:06:07Z")

func allowRecord(path string) *portcullisv1.DecisionRecord {
	return &portcullisv1.DecisionRecord{
		Time: timestamppb.New(logsT0), Decision: "allow", Binary: "/usr/bin/python3",
		Host: "orders.example.com", Port: 443, HttpMethod: "POST", Path: path,
		McpMethod: "tools/call", Tool: "lookup_order", Entry: "orders", Rule: "rules[3]",
		Reason: "tools/call lookup_order is allowed by orders", PolicyVersion: "1",
	}
}

func denyRecord(id string) *portcullisv1.DecisionRecord {
	return &portcullisv1.DecisionRecord{
		Time: timestamppb.New(logsT0.Add(time.Second)), Decision: "deny", Binary: "/usr/bin/python3",
		Host: "orders.example.com", Port: 443, HttpMethod: "POST", Path: "/mcp",
		McpMethod: "tools/call", Tool: "refund_order", Entry: "orders", Rule: "deny_rules[0]",
		Reason: "tools/call refund_order is denied by orders", PolicyVersion: "1", DenialId: id,
	}
}

func lines(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestLogs(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sbToken := jsonOut(t, gw, admin, "sandbox", "create", "orders", "-f", ordersV1File)["token"].(string)
	otherToken := jsonOut(t, gw, admin, "sandbox", "create", "other")["token"].(string)
	shipRecords(t, gw, sbToken, allowRecord("/mcp"), denyRecord("dn_first"))

	stdout, stderr, code := cliAgainst(t, gw, admin, "logs", "orders")
	ok(t, code, stderr)
	got := lines(stdout)
	if len(got) != 2 {
		t.Fatalf("logs orders: want 2 lines:\n%s", stdout)
	}
	want := []string{
		`2026-03-04T05:06:07Z allow /usr/bin/python3 POST orders.example.com:443/mcp mcp=tools/call tool=lookup_order entry=orders rule=rules[3] policy=1`,
		`2026-03-04T05:06:08Z deny  /usr/bin/python3 POST orders.example.com:443/mcp mcp=tools/call tool=refund_order reason="tools/call refund_order is denied by orders" policy=1 denial_id=dn_first`,
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("logs line %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}

	// --decision deny: the denials alone, each with its denial_id.
	stdout, stderr, code = cliAgainst(t, gw, admin, "logs", "orders", "--decision", "deny")
	ok(t, code, stderr)
	if got := lines(stdout); len(got) != 1 || !strings.Contains(got[0], " deny ") || !strings.HasSuffix(got[0], "denial_id=dn_first") {
		t.Errorf("logs --decision deny:\n%s", stdout)
	}
	// --limit: the newest.
	stdout, stderr, code = cliAgainst(t, gw, admin, "logs", "orders", "--limit", "1")
	ok(t, code, stderr)
	if got := lines(stdout); len(got) != 1 || !strings.Contains(got[0], "dn_first") {
		t.Errorf("logs --limit 1: want the newest record:\n%s", stdout)
	}
	// --denial-id finds one denial.
	js := jsonOut(t, gw, admin, "logs", "orders", "--denial-id", "dn_first")
	if list, _ := js["decisions"].([]any); len(list) != 1 {
		t.Errorf("logs --denial-id: %v", js)
	}
	// -o json: the ListDecisionsResponse, oldest first.
	js = jsonOut(t, gw, admin, "logs", "orders")
	list, _ := js["decisions"].([]any)
	if len(list) != 2 {
		t.Fatalf("logs -o json: %v", js)
	}
	first, last := list[0].(map[string]any), list[1].(map[string]any)
	hasKeys(t, last, "id", "record", "received_at")
	if rec := last["record"].(map[string]any); rec["denial_id"] != "dn_first" || rec["decision"] != "deny" || rec["sandbox"] != "orders" {
		t.Errorf("logs -o json, last record: %v", rec)
	}
	if first["record"].(map[string]any)["decision"] != "allow" {
		t.Errorf("logs -o json: not oldest first: %v", list)
	}

	// The sandbox reads its own records, not another's; operators read all.
	if _, stderr, code := cliAgainst(t, gw, sbToken, "logs", "orders"); code != exitOK {
		t.Errorf("own sandbox token: exit %d: %s", code, stderr)
	}
	if _, _, code := cliAgainst(t, gw, otherToken, "logs", "orders"); code != exitNo {
		t.Errorf("another sandbox's token: exit %d, want 1", code)
	}

	// Refusals.
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"logs", "nope"}, exitNo, `sandbox "nope" not found`},
		{[]string{"logs", "nope", "--tail"}, exitNo, `sandbox "nope" not found`},
		{[]string{"logs", "orders", "--decision", "maybe"}, exitInvalid, "--decision must be allow, deny, audit or rate_limited"},
		{[]string{"logs", "orders", "--tail", "--decision", "DENY"}, exitInvalid, "--decision must be allow, deny, audit or rate_limited"},
		{[]string{"logs", "orders", "--limit", "0"}, exitInvalid, "--limit must be from 1 to 1000"},
		{[]string{"logs", "orders", "--limit", "1001"}, exitInvalid, "--limit must be from 1 to 1000"},
		{[]string{"logs", "orders", "--tail", "--denial-id", "dn_first"}, exitInvalid, "not both"},
		{[]string{"logs"}, exitInvalid, "needs SANDBOX"},
	} {
		_, stderr, code := cliAgainst(t, gw, admin, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d with %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
	}
}

// TestLogLineQuoting: what the agent chose (paths, tool names) cannot
// forge a line or reach the terminal as an escape sequence.
func TestLogLineQuoting(t *testing.T) {
	r := denyRecord("dn_x")
	r.Path = "/a\n2026-01-01T00:00:00Z allow"
	r.Tool = "x\x1b[2J"
	r.Binary = ""
	r.PolicyVersion = ""
	line := apitext.DecisionLine(&portcullisv1.StoredDecision{Record: r})
	if strings.ContainsAny(line, "\n\x1b") {
		t.Fatalf("raw control characters in %q", line)
	}
	for _, want := range []string{` - POST "orders.example.com:443/a\n2026-01-01T00:00:00Z allow" `, ` tool="x\x1b[2J" `, " policy=none "} {
		if !strings.Contains(line, want) {
			t.Errorf("line %s\nlacks %s", line, want)
		}
	}
}

// A denial by a pinned tool definition shows its reason code and the
// fingerprint seen; other lines show neither.
func TestLogLineDefinition(t *testing.T) {
	r := denyRecord("dn_pin")
	plain := apitext.DecisionLine(&portcullisv1.StoredDecision{Record: r})
	r.ReasonCode, r.ToolDefinition = "tool_definition_changed", "sha256:"+strings.Repeat("b", 64)
	line := apitext.DecisionLine(&portcullisv1.StoredDecision{Record: r})
	if want := " reason_code=tool_definition_changed tool_definition=sha256:" + strings.Repeat("b", 64) + " denial_id=dn_pin"; !strings.HasSuffix(line, want) {
		t.Errorf("line %s\nwant it to end with %s", line, want)
	}
	if strings.Contains(plain, "reason_code") || strings.Contains(plain, "tool_definition") {
		t.Errorf("a plain denial's line shows pin fields: %s", plain)
	}
	r.ToolDefinition = ""
	if line := apitext.DecisionLine(&portcullisv1.StoredDecision{Record: r}); !strings.Contains(line, " tool_definition=- ") {
		t.Errorf("no definition verified: %s", line)
	}
}

// tailRun is a `logs --tail` running in the background.
type tailRun struct {
	out, errOut lockedBuffer
	cancel      context.CancelFunc
	code        chan int
}

func startTail(t *testing.T, gw *gatewaytest.Gateway, args ...string) *tailRun {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	tr := &tailRun{cancel: cancel, code: make(chan int, 1)}
	argv := append([]string{"--gateway", gw.URL, "--token", gatewaytest.AdminToken}, args...)
	go func() {
		tr.code <- run(ctx, argv, strings.NewReader(""), &tr.out, &tr.errOut, func(string) string { return "" })
	}()
	t.Cleanup(func() {
		cancel()
		<-tr.code
	})
	return tr
}

// waitFor waits until stdout holds want.
func (tr *tailRun) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(tr.out.String(), want) {
		select {
		case code := <-tr.code:
			t.Fatalf("tail ended early with exit %d; stdout:\n%s\nstderr:\n%s", code, tr.out.String(), tr.errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tail never printed %q; stdout:\n%s\nstderr:\n%s", want, tr.out.String(), tr.errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop interrupts the tail and returns its exit code.
func (tr *tailRun) stop(t *testing.T) int {
	t.Helper()
	tr.cancel()
	select {
	case code := <-tr.code:
		tr.code <- code // for the cleanup
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("tail did not end when interrupted")
		return -1
	}
}

func TestLogsTail(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sbToken := jsonOut(t, gw, admin, "sandbox", "create", "orders", "-f", ordersV1File)["token"].(string)
	shipRecords(t, gw, sbToken, allowRecord("/mcp"), denyRecord("dn_before"))

	// --timeout bounds calls, never a tail: the tail outlives it.
	text := startTail(t, gw, "--timeout", "1s", "logs", "orders", "--tail")
	jsonl := startTail(t, gw, "logs", "orders", "--tail", "--decision", "deny", "-o", "json")
	text.waitFor(t, "denial_id=dn_before")
	jsonl.waitFor(t, "dn_before")
	time.Sleep(1500 * time.Millisecond)

	shipRecords(t, gw, sbToken, allowRecord("/mcp/late"), denyRecord("dn_after"))
	text.waitFor(t, "denial_id=dn_after")
	jsonl.waitFor(t, "dn_after")
	if code := text.stop(t); code != exitOK {
		t.Errorf("interrupted tail: exit %d, want 0; stderr:\n%s", code, text.errOut.String())
	}
	if code := jsonl.stop(t); code != exitOK {
		t.Errorf("interrupted tail -o json: exit %d, want 0; stderr:\n%s", code, jsonl.errOut.String())
	}

	got := lines(text.out.String())
	if len(got) != 4 || !strings.Contains(got[2], "orders.example.com:443/mcp/late") || !strings.HasSuffix(got[3], "denial_id=dn_after") {
		t.Errorf("tail: want the 2 stored records then the 2 new ones, in order:\n%s", text.out.String())
	}
	// -o json: one StoredDecision per line, the denials alone.
	var ids []string
	for _, l := range lines(jsonl.out.String()) {
		var d struct {
			ID     int64 `json:"id"` // a number, as every -o json integer
			Record struct {
				Decision string `json:"decision"`
				DenialID string `json:"denial_id"`
			} `json:"record"`
		}
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("tail -o json: line %q: %v", l, err)
		}
		if d.Record.Decision != "deny" || d.ID == 0 {
			t.Errorf("tail --decision deny -o json: %s", l)
		}
		ids = append(ids, d.Record.DenialID)
	}
	if strings.Join(ids, " ") != "dn_before dn_after" {
		t.Errorf("tail -o json: denial ids %v, want [dn_before dn_after]", ids)
	}

	// A gateway that goes away ends the tail: unavailable, not success.
	last := startTail(t, gw, "logs", "orders", "--tail")
	last.waitFor(t, "denial_id=dn_after")
	gw.Stop()
	select {
	case code := <-last.code:
		last.code <- code
		if code != exitUnavailable || !strings.Contains(last.errOut.String(), "unavailable") {
			t.Errorf("tail of a stopped gateway: exit %d, stderr %q; want 4", code, last.errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail did not end when the gateway stopped")
	}
}

// A summary's line says how many, until when, and its first and last
// denial ids; a record whose path was cut says its length and digest.
func TestLogLineSummaryAndCuts(t *testing.T) {
	r := denyRecord("")
	r.SummaryCount, r.SummaryLast = 580, timestamppb.New(time.Date(2026, 12, 5, 1, 0, 10, 0, time.UTC))
	r.SummaryFirstDenialId, r.SummaryLastDenialId = "dn_a", "dn_b"
	r.Cuts = []*portcullisv1.FieldCut{{Field: "path", Length: 61440, Sha256: strings.Repeat("c", 64)}}
	line := apitext.DecisionLine(&portcullisv1.StoredDecision{Record: r})
	want := " summary=580 until=2026-12-05T01:00:10Z first_denial_id=dn_a last_denial_id=dn_b cut=path:61440:sha256:" + strings.Repeat("c", 64)
	if !strings.HasSuffix(line, want) {
		t.Errorf("line %s\nwant it to end with %s", line, want)
	}
}
