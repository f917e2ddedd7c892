package apitext

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A held call's arguments are shown as the agent wrote them: numbers
// that a float64 would round stay digit for digit, and nothing in a
// string can reach the terminal as a control character.
func TestCallArguments(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"amount":0.10000000000000000555,"order":12345678901234567890}`,
			"{\n  \"amount\": 0.10000000000000000555,\n  \"order\": 12345678901234567890\n}"},
		{`{"n":1e400,"neg":-0.0,"list":[1,2.50]}`,
			"{\n  \"n\": 1e400,\n  \"neg\": -0.0,\n  \"list\": [\n    1,\n    2.50\n  ]\n}"},
		{"{\"note\":\"a\u202eb\u0085c\U000E0041\"}", `{` + "\n" + `  "note": "a\u202eb\u0085c\udb40\udc41"` + "\n}"},
		{"not json\x1b[2J", `"not json\x1b[2J"`},
	} {
		if got := CallArguments(c.in); got != c.want {
			t.Errorf("CallArguments(%q) =\n%s\nwant\n%s", c.in, got, c.want)
		}
	}
}

// The list shows what each call asks for and how long it has left;
// show adds the rule, the decision and the arguments.
func TestCalls(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	held := &portcullisv1.HeldCall{Id: 7, Sandbox: "orders", Proxy: "p-1", McpMethod: "tools/call", Tool: "refund",
		Status: "held", Deadline: timestamppb.New(now.Add(92 * time.Second)), ArgumentsJson: `{"amount":12.50}`,
		ArgumentsDigest: "sha256:ab", PolicyVersion: 3, Entry: "orders", Rule: "refund"}
	rest := &portcullisv1.HeldCall{Id: 6, Sandbox: "orders", Proxy: "p 2", Method: "DELETE", Path: "/v1/orders/9",
		Status: "denied", DecidedAt: timestamppb.New(now.Add(-time.Minute)), DecidedBy: "olive", Reason: "no\nway"}
	var b strings.Builder
	if err := Calls(&b, []*portcullisv1.HeldCall{held, rest}, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"7   orders   tools/call refund", "held", "in 1m32s", "DELETE /v1/orders/9", "decided 2026-12-05T11:59:00Z", `"p 2"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("calls list:\n%s\nwant %q in it", b.String(), want)
		}
	}
	b.Reset()
	Call(&b, rest, now)
	if !strings.Contains(b.String(), "reason:           no way") || !strings.Contains(b.String(), "decided by:       olive") {
		t.Errorf("calls show of a denied call:\n%s", b.String())
	}
	b.Reset()
	Call(&b, held, now)
	if !strings.Contains(b.String(), "arguments:\n  {\n    \"amount\": 12.50\n  }\n") || strings.Contains(b.String(), "decided by") {
		t.Errorf("calls show of a held call:\n%s", b.String())
	}
	if got := CallOutcome(&portcullisv1.HeldCall{Id: 7, Status: "approved", ProposalId: 12}); got != "call 7 approved; proposal 12 filed to allow these arguments without review" {
		t.Errorf("outcome %q", got)
	}
}
