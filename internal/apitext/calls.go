package apitext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Held calls: a call a review rule holds at its proxy until a person
// decides it (CallService). The agent chose the tool, the path and the
// arguments, so they are quoted or escaped before they reach a terminal.

// CallTarget is what a held call asks for: "tools/call refund" for an MCP
// call, "POST /v1/refunds" for a REST one.
func CallTarget(c *portcullisv1.HeldCall) string {
	if c.GetMcpMethod() != "" {
		if c.GetTool() != "" {
			return c.GetMcpMethod() + " " + Field(c.GetTool())
		}
		return Field(c.GetMcpMethod())
	}
	return Dash(c.GetMethod()) + " " + Field(Dash(c.GetPath()))
}

// CallDeadline is a held call's deadline as a person reads it now: the
// time left while it is held ("in 1m32s", "due" once past), else when it
// was decided.
func CallDeadline(c *portcullisv1.HeldCall, now time.Time) string {
	if c.GetStatus() != "held" {
		return "decided " + When(c.GetDecidedAt())
	}
	if c.GetDeadline() == nil {
		return "-"
	}
	left := c.GetDeadline().AsTime().Sub(now).Truncate(time.Second)
	if left <= 0 {
		return "due"
	}
	return "in " + left.String()
}

// Calls is calls list's table.
func Calls(w io.Writer, calls []*portcullisv1.HeldCall, now time.Time) error {
	return table(w, func(add func(...string)) {
		for _, c := range calls {
			add(strconv.FormatUint(c.GetId(), 10), Dash(c.GetSandbox()), CallTarget(c),
				Dash(c.GetStatus()), CallDeadline(c, now), Field(Dash(c.GetProxy())))
		}
	}, "ID", "SANDBOX", "CALL", "STATUS", "DEADLINE", "PROXY")
}

// Call writes a held call as calls show (and calls approve, before it
// approves) prints it: its fields, then its arguments pretty-printed with
// their numbers exactly as the agent wrote them.
func Call(w io.Writer, c *portcullisv1.HeldCall, now time.Time) error {
	kv := []string{
		"id", strconv.FormatUint(c.GetId(), 10),
		"status", Dash(c.GetStatus()),
		"sandbox", Dash(c.GetSandbox()),
		"call", CallTarget(c),
		"endpoint", Field(Dash(c.GetEndpoint())),
		"proxy", Field(Dash(c.GetProxy())),
		"binary", Field(Dash(c.GetBinary())),
		"policy version", VersionCell(c.GetPolicyVersion()),
		"rule", Field(Dash(c.GetEntry())) + " " + Field(Dash(c.GetRule())),
		"requested", When(c.GetRequestedAt()),
		"deadline", When(c.GetDeadline()) + " (" + CallDeadline(c, now) + ")",
	}
	if c.GetStatus() != "held" {
		kv = append(kv, "decided by", Field(Dash(c.GetDecidedBy())), "reason", OneLine(Dash(c.GetReason())))
	}
	if c.GetProposalId() != 0 {
		kv = append(kv, "proposal", strconv.FormatUint(c.GetProposalId(), 10))
	}
	if c.GetTraceId() != "" {
		kv = append(kv, "trace", Field(c.GetTraceId()))
	}
	kv = append(kv, "arguments digest", Dash(c.GetArgumentsDigest()))
	if err := Fields(w, kv...); err != nil {
		return err
	}
	args := c.GetArgumentsJson()
	if args == "" {
		_, err := fmt.Fprintln(w, "arguments: - (cleared after the retention, or none)")
		return err
	}
	_, err := fmt.Fprintf(w, "arguments:\n  %s\n", strings.ReplaceAll(CallArguments(args), "\n", "\n  "))
	return err
}

// CallArguments pretty-prints a held call's arguments_json: indented,
// every number, key and string exactly as the agent wrote it (Indent
// reformats white space only; decoding would round 0.1 + 0.2 and large
// integers), any character a terminal would act on escaped as \uXXXX. A
// body that is not JSON is shown as one quoted string.
func CallArguments(s string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "", "  "); err != nil {
		return strconv.Quote(s)
	}
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = escapeUnprintable(l)
	}
	return strings.Join(lines, "\n")
}

// CallOutcome is the line calls approve and deny print: where the call
// stands after the decision, and the proposal approve --remember filed.
func CallOutcome(c *portcullisv1.HeldCall) string {
	line := fmt.Sprintf("call %d %s", c.GetId(), Dash(c.GetStatus()))
	if c.GetProposalId() != 0 {
		line += fmt.Sprintf("; proposal %d filed to allow these arguments without review", c.GetProposalId())
	}
	return line
}
