package gatewayocsf_test

import (
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/gatewayocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
	"github.com/portcullis-dev/portcullis/store"
)

// A held call and each way it ends validate as Detection Findings, with
// the security control's action and disposition a SIEM files them by;
// the arguments never leave, only their digest.
func TestHeldCallsValidate(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	call := func(status, by, reason string) store.HeldCall {
		c := store.HeldCall{ID: 9, Sandbox: "orders", ProxyID: "p-1", Binary: "/usr/bin/python3", Host: "orders.example.com", Port: 443,
			Method: "POST", Path: "/mcp", MCPMethod: "tools/call", Tool: "refund", ArgumentsJSON: `{"card":"4111111111111111"}`,
			ArgumentsDigest: digest, PolicyVersion: 4, Entry: "orders", Rule: "refund", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
			Status: status, RequestedAt: at, Deadline: at.Add(2 * time.Minute), DecidedBy: by, Reason: reason}
		if status != store.CallHeld {
			c.DecidedAt = at.Add(time.Minute)
		}
		return c
	}
	rest := call(store.CallHeld, "", "")
	rest.MCPMethod, rest.Tool, rest.Method, rest.Path = "", "", "DELETE", "/v1/orders/9"
	cases := []struct {
		name                                       string
		c                                          store.HeldCall
		activity, status, action, disposition, sev int
		wantInMessage                              string
	}{
		{"held", call(store.CallHeld, "", ""), 1, 1, 99, 14, 3, "held for review: tools/call refund at orders.example.com:443"},
		{"held REST", rest, 1, 1, 99, 14, 3, "DELETE /v1/orders/9"},
		{"approved", call(store.CallApproved, "olive", "agreed"), 3, 4, 1, 8, 1, "Call 9 of sandbox orders approved"},
		{"denied", call(store.CallDenied, "olive", "no"), 3, 4, 2, 25, 1, "denied"},
		{"expired", call(store.CallExpired, "gateway", "review_timeout"), 3, 4, 2, 2, 1, "expired"},
		{"failed", call(store.CallFailed, "proxy", "proxy restarted"), 3, 4, 2, 27, 1, "failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := gatewayocsf.FromHeldCall(c.c, ocsf.Gateway)
			b := encode(t, ev)
			if err := ocsftest.Validate(b); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if ev.ClassUID != 2004 || ev.ActivityID != c.activity || ev.StatusID != c.status || ev.ActionID != c.action ||
				ev.DispositionID != c.disposition || ev.SeverityID != c.sev {
				t.Errorf("class %d activity %d status %d action %d disposition %d severity %d; want 2004 %d %d %d %d %d",
					ev.ClassUID, ev.ActivityID, ev.StatusID, ev.ActionID, ev.DispositionID, ev.SeverityID, c.activity, c.status, c.action, c.disposition, c.sev)
			}
			if !strings.Contains(ev.Message, c.wantInMessage) {
				t.Errorf("message %q lacks %q", ev.Message, c.wantInMessage)
			}
			if strings.Contains(string(b), "4111111111111111") || strings.Contains(string(b), `"arguments"`) {
				t.Errorf("the event carries the arguments: %s", b)
			}
			if !strings.Contains(string(b), digest) || ev.Metadata.CorrelationUID != c.c.TraceID || ev.FindingInfo.UID != "call-9" {
				t.Errorf("the event lacks the digest, the trace or the call's uid: %s", b)
			}
			if by := c.c.DecidedBy; by != "" && (ev.Actor == nil || ev.Actor.User.Name != by) {
				t.Errorf("actor %+v, want %s", ev.Actor, by)
			}
		})
	}
}

// A person's decision on a held call is an audit entry of its own, mapped
// as the approval of a proposal is: Entity Management, the held call the
// entity, the decider the actor.
func TestCallAuditValidate(t *testing.T) {
	for action, name := range map[string]string{store.ActionCallApprove: "Approve", store.ActionCallDeny: "Deny"} {
		a := store.AuditEntry{Time: at, Actor: "olive", Action: action, Sandbox: "orders", Target: "9", Hash: strings.Repeat("cd", 32)}
		ev := gatewayocsf.FromAudit(a, ocsf.Gateway)
		b := encode(t, ev)
		if err := ocsftest.Validate(b); err != nil {
			t.Fatalf("%s: %v\n%s", action, err, b)
		}
		if ev.ActivityName != name || ev.Entity == nil || ev.Entity.Type != "Held call" || ev.Actor.User.Name != "olive" {
			t.Errorf("%s: activity %q entity %+v actor %+v; want %q on a Held call by olive", action, ev.ActivityName, ev.Entity, ev.Actor.User, name)
		}
	}
}
