package ocsf_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/gatewayocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
	"github.com/portcullis-dev/portcullis/internal/version"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/store"
)

var at = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

func encode(t *testing.T, e ocsf.Event) []byte {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every kind of event we write validates against the vendored OCSF
// class definitions, names our schema version, and carries the numbers
// a SIEM files it by.
func TestEventsValidate(t *testing.T) {
	if v, err := ocsftest.Version(); err != nil || v != ocsf.Version {
		t.Fatalf("vendored schema %q (%v), events name %q", v, err, ocsf.Version)
	}
	deny := decision.Record{Time: at, Sandbox: "orders", Binary: "/usr/bin/python3", Host: "api.example.com", Port: 443,
		HTTPMethod: "POST", Path: "/v1/charge", Decision: "deny", Reason: "no rule allows it", PolicyVersion: "3", DenialID: "dn_0123"}
	tool := decision.Record{Time: at, Sandbox: "orders", Binary: "/usr/bin/node", Host: "mcp.example.com", Port: 443,
		HTTPMethod: "POST", Path: "/mcp", MCPMethod: "tools/call", Tool: "refund", Decision: "deny", DenialID: "dn_4567",
		ArgumentsDigest: "sha256:ab", Entry: "mcp", Rule: "0"}
	cases := []struct {
		name            string
		ev              ocsf.Event
		class, activity int
		severity        int
		wantInMessage   string
	}{
		{"http deny", ocsf.FromDecision(deny, ocsf.Proxy), 4002, 6, ocsf.SeverityMedium, "deny POST api.example.com:443/v1/charge"},
		{"http allow", ocsf.FromDecision(decision.Record{Time: at, Host: "h", Port: 80, HTTPMethod: "GET", Path: "/", Decision: "allow"}, ocsf.Proxy), 4002, 3, ocsf.SeverityInformational, "allow GET h:80/"},
		{"tunnel", ocsf.FromDecision(decision.Record{Time: at, Host: "h", Port: 443, Decision: "deny"}, ocsf.Proxy), 4002, 1, ocsf.SeverityMedium, "deny CONNECT h:443"},
		{"odd method", ocsf.FromDecision(decision.Record{Time: at, Addr: "10.0.0.1", Port: 80, HTTPMethod: "PROPFIND", Decision: "audit"}, ocsf.Proxy), 4002, 99, ocsf.SeverityLow, "audit PROPFIND"},
		{"tool call", ocsf.FromDecision(tool, ocsf.Proxy), 6003, 99, ocsf.SeverityMedium, "tools/call refund at mcp.example.com:443"},
		{"initialize", ocsf.FromDecision(decision.Record{Time: at, Host: "m", Port: 1, HTTPMethod: "POST", MCPMethod: "initialize", Decision: "allow"}, ocsf.Proxy), 6003, 99, ocsf.SeverityInformational, "initialize"},
		{"tools list", ocsf.FromDecision(decision.Record{Time: at, Host: "m", Port: 1, HTTPMethod: "POST", MCPMethod: "tools/list", Decision: "allow"}, ocsf.Gateway), 6003, 2, ocsf.SeverityInformational, "tools/list"},
		{"summary", ocsf.FromDecision(decision.Record{Time: at, Sandbox: "orders", Host: "h", Port: 443, HTTPMethod: "GET", Decision: "deny", Reason: "no rule",
			Summary: &decision.Summary{Count: 580, Last: at.Add(time.Second), FirstDenialID: "dn_1", LastDenialID: "dn_2"},
			Cuts:    []decision.Cut{{Field: "path", Length: 61440, SHA256: "ab"}}}, ocsf.Proxy), 4002, 3, ocsf.SeverityMedium, "580× deny GET h:443"},
		{"rate limited", ocsf.FromDecision(decision.Record{Time: at, Host: "m", Port: 1, HTTPMethod: "POST", MCPMethod: "tools/call", Tool: "t", Decision: "rate_limited"}, ocsf.Proxy), 6003, 99, ocsf.SeverityLow, "rate_limited"},
		{"policy set", gatewayocsf.FromAudit(store.AuditEntry{Seq: 7, Time: at, Actor: "alice", Action: store.ActionPolicySet, Sandbox: "orders", Target: "orders",
			BeforeHash: "sha256:aaaa", AfterHash: "sha256:bbbb", Detail: map[string]string{"version": "4", "source": "set"}, Hash: "h7", PrevHash: "h6"}, ocsf.Gateway), 3004, 3, ocsf.SeverityLow, "policy.set orders orders by alice"},
		{"rollback", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "alice", Action: store.ActionPolicySet, Sandbox: "orders", BeforeHash: "b", AfterHash: "a", Detail: map[string]string{"source": "rollback"}}, ocsf.Gateway), 3004, 99, ocsf.SeverityLow, "by alice"},
		{"approval", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "bob", Action: store.ActionProposalOK, Sandbox: "orders", Target: "12", AfterHash: "sha256:cc", Detail: map[string]string{"approver": "bob", "reason": "ok"}}, ocsf.Gateway), 3004, 99, ocsf.SeverityLow, "proposal.approve orders 12 by bob"},
		{"rejection", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "bob", Action: store.ActionProposalState, Sandbox: "orders", Target: "12", Detail: map[string]string{"from": "pending", "to": "rejected", "reason": "too wide"}}, ocsf.Gateway), 3004, 99, ocsf.SeverityInformational, "proposal.status"},
		{"token revoke", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "admin", Action: store.ActionTokenRevoke, Target: "ci"}, ocsf.Gateway), 3004, 4, ocsf.SeverityLow, "token.revoke ci by admin"},
		{"mcp allow", ocsf.FromDecision(decision.Record{Time: at, Sandbox: "orders", Binary: "/usr/bin/node", Host: "mcp.example.com", Addr: "93.184.216.34", Port: 443, HTTPMethod: "POST", MCPMethod: "tools/call", Tool: "lookup", Decision: "allow", Entry: "mcp", Rule: "rules[0]", PolicyVersion: "3"}, ocsf.Proxy), 6003, 99, ocsf.SeverityInformational, "allow tools/call lookup"},
		{"connect allow", ocsf.FromDecision(decision.Record{Time: at, Host: "api.example.com", Addr: "93.184.216.34", Port: 443, Decision: "allow", Entry: "api", PolicyVersion: "2"}, ocsf.Proxy), 4002, 1, ocsf.SeverityInformational, "allow CONNECT api.example.com:443"},
		{"token", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "admin", Action: store.ActionTokenCreate, Target: "ci", Detail: map[string]string{"role": "admin"}}, ocsf.Gateway), 3004, 1, ocsf.SeverityLow, "token.create ci by admin"},
		{"freeze", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "sentry:w1", Action: store.ActionFreeze, Sandbox: "orders", Target: "orders", BeforeHash: "x", AfterHash: "y"}, ocsf.Gateway), 3004, 12, ocsf.SeverityHigh, "sandbox.freeze"},
		{"unfreeze", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "alice", Action: store.ActionUnfreeze, Sandbox: "orders", Target: "orders"}, ocsf.Gateway), 3004, 13, ocsf.SeverityMedium, "sandbox.unfreeze"},
		{"unknown action", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Action: "something.new"}, ocsf.Gateway), 3004, 99, ocsf.SeverityInformational, "something.new"},
		{"proposal", gatewayocsf.FromProposal(store.Proposal{ID: 12, Sandbox: "orders", Status: store.ProposalPending, Proposer: "orders", CreatedAt: at, DenialID: "dn_0123"},
			[]lifecycle.Finding{{Kind: "new_endpoint", Endpoint: "api.example.com:443", Detail: "reaches a new host"}, {Kind: "exceeds_boundary", Detail: "past the boundary"}}, ocsf.Gateway), 2004, 1, ocsf.SeverityHigh, "Proposal 12 for sandbox orders: 2 prover finding(s)"},
		{"proposal decided", gatewayocsf.FromProposal(store.Proposal{ID: 13, Sandbox: "orders", Status: store.ProposalApplied, CreatedAt: at, UpdatedAt: at}, nil, ocsf.Gateway), 2004, 2, ocsf.SeverityInformational, "Proposal 13"},
		{"drops", ocsf.SinkDrops("hec:x", 5, at, at.Add(time.Minute), ocsf.Proxy), 6008, 1, ocsf.SeverityMedium, "5 event(s) dropped"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := encode(t, c.ev)
			warnings, err := ocsftest.Check(b)
			if err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			// What OCSF's validator warns about: a sibling that is not
			// its enum value's caption, "Other" where the source's own
			// word belongs.
			for _, w := range warnings {
				t.Errorf("warning: %s", w)
			}
			if c.ev.ClassUID != c.class || c.ev.ActivityID != c.activity || c.ev.SeverityID != c.severity {
				t.Errorf("class %d activity %d severity %d; want %d %d %d", c.ev.ClassUID, c.ev.ActivityID, c.ev.SeverityID, c.class, c.activity, c.severity)
			}
			if c.ev.Metadata.Version != "1.8.0" {
				t.Errorf("metadata.version %q", c.ev.Metadata.Version)
			}
			if !strings.Contains(c.ev.Message, c.wantInMessage) {
				t.Errorf("message %q lacks %q", c.ev.Message, c.wantInMessage)
			}
		})
	}
}

// What SIEMs pivot on: the product's version (the build's), and
// observables for hosts, addresses and users, each naming the attribute
// it points at with its OCSF dictionary type.
func TestSIEMFields(t *testing.T) {
	want := version.Get().String()
	if want == "" || ocsf.Gateway.Version != want || ocsf.Proxy.Version != want {
		t.Errorf("product versions %q %q, want the build's %q", ocsf.Gateway.Version, ocsf.Proxy.Version, want)
	}
	type obs = ocsf.Observable
	for _, tc := range []struct {
		name string
		ev   ocsf.Event
		want []obs
	}{
		{"decision", ocsf.FromDecision(decision.Record{Time: at, Host: "api.example.com", Addr: "93.184.216.34", Port: 443, HTTPMethod: "GET", Path: "/", Decision: "deny"}, ocsf.Proxy),
			[]obs{{Name: "dst_endpoint.hostname", TypeID: 1, Type: "Hostname", Value: "api.example.com"}, {Name: "dst_endpoint.ip", TypeID: 2, Type: "IP Address", Value: "93.184.216.34"}}},
		{"ip only", ocsf.FromDecision(decision.Record{Time: at, Addr: "10.0.0.1", Port: 80, HTTPMethod: "GET", Decision: "deny"}, ocsf.Proxy),
			[]obs{{Name: "dst_endpoint.ip", TypeID: 2, Type: "IP Address", Value: "10.0.0.1"}}},
		{"audit", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "alice", Action: store.ActionTokenCreate, Target: "ci"}, ocsf.Gateway),
			[]obs{{Name: "actor.user.name", TypeID: 4, Type: "User Name", Value: "alice"}}},
		{"remediation", gatewayocsf.FromSentryAction(store.SentryAction{ID: 1, Source: "s", EventID: "e", Sandbox: "orders", Status: store.SentryDismissed, ReceivedAt: at, CreatedAt: at}, "alice", ocsf.Gateway),
			[]obs{{Name: "actor.user.name", TypeID: 4, Type: "User Name", Value: "alice"}}},
	} {
		if !reflect.DeepEqual(tc.ev.Observables, tc.want) {
			t.Errorf("%s: observables %+v, want %+v", tc.name, tc.ev.Observables, tc.want)
		}
		if err := ocsftest.Validate(encode(t, tc.ev)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// Every event declares the profiles whose attributes it carries, and no
// other: a 2004 with a policy (a Sentry policy_decision, a drift finding)
// declares security_control; a proposal's finding, which carries only
// attributes Detection Finding defines, declares none.
func TestProfilesDeclared(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   ocsf.Event
		want []string
	}{
		{"http", ocsf.FromDecision(decision.Record{Time: at, Host: "h", Port: 80, HTTPMethod: "GET", Decision: "allow"}, ocsf.Proxy), []string{"security_control", "host"}},
		{"mcp", ocsf.FromDecision(decision.Record{Time: at, Host: "h", Port: 80, HTTPMethod: "POST", MCPMethod: "tools/list", Decision: "allow"}, ocsf.Proxy), []string{"security_control"}},
		{"audit", gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "alice", Action: store.ActionPolicySet}, ocsf.Gateway), nil},
		{"proposal", gatewayocsf.FromProposal(store.Proposal{ID: 1, Status: store.ProposalPending, CreatedAt: at}, nil, ocsf.Gateway), nil},
		{"drift", gatewayocsf.FromSentryFinding(store.SentryDrift, store.SentryEvent{Source: "s", ID: "1", Subject: "orders", PolicyHash: "sha256:ab"}, "", at, ocsf.Gateway), []string{"security_control"}},
		{"unmediated", gatewayocsf.FromSentryFinding(store.SentryUnmediated, store.SentryEvent{Source: "s", ID: "1", Subject: "orders"}, "t", at, ocsf.Gateway), nil},
		{"remediation", gatewayocsf.FromSentryAction(store.SentryAction{ID: 1, Source: "s", EventID: "e", Sandbox: "orders", Status: store.SentryFrozen, Version: 2, ReceivedAt: at, CreatedAt: at}, "alice", ocsf.Gateway), []string{"security_control", "host"}},
		{"drops", ocsf.SinkDrops("file", 1, at, at, ocsf.Proxy), nil},
	} {
		if !reflect.DeepEqual(tc.ev.Metadata.Profiles, tc.want) {
			t.Errorf("%s: profiles %v, want %v", tc.name, tc.ev.Metadata.Profiles, tc.want)
		}
		if err := ocsftest.Validate(encode(t, tc.ev)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// A denial carries its id where a SIEM joins it with the proposal made
// from it; an audit entry carries actor, outcome and both hashes.
func TestMappingFields(t *testing.T) {
	e := ocsf.FromDecision(decision.Record{Time: at, Host: "h", Port: 443, HTTPMethod: "POST", MCPMethod: "tools/call", Tool: "refund",
		Decision: "deny", DenialID: "dn_1", Binary: "/bin/agent", Rule: "2", Entry: "mcp"}, ocsf.Proxy)
	if e.Metadata.UID != "dn_1" || e.Unmapped["denial_id"] != "dn_1" || e.ActionID != 2 || e.DispositionID != 2 {
		t.Errorf("denial: uid %q unmapped %v action %d disposition %d", e.Metadata.UID, e.Unmapped["denial_id"], e.ActionID, e.DispositionID)
	}
	if e.API.Operation != "tools/call" || e.Resources[0].Name != "refund" || e.Actor.AppName != "/bin/agent" || e.FirewallRule.UID != "2" {
		t.Errorf("tool call fields: %+v %+v %+v %+v", e.API, e.Resources, e.Actor, e.FirewallRule)
	}
	a := gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "alice", Action: store.ActionPolicySet, Sandbox: "orders",
		BeforeHash: "sha256:aa", AfterHash: "sha256:bb", Detail: map[string]string{"version": "4", "source": "rollback"}, Hash: "hh"}, ocsf.Gateway)
	if a.Actor.User.Name != "alice" || a.Entity.Data["hash"] != "sha256:aa" || a.EntityResult.Data["hash"] != "sha256:bb" ||
		a.EntityResult.Version != "4" || a.ActivityName != "Rollback" || a.StatusID != 1 || a.Metadata.UID != "hh" {
		t.Errorf("audit: %+v entity %+v result %+v", a, a.Entity, a.EntityResult)
	}
	r := gatewayocsf.FromAudit(store.AuditEntry{Time: at, Actor: "bob", Action: store.ActionProposalState, Target: "3", Detail: map[string]string{"to": "rejected", "reason": "no"}}, ocsf.Gateway)
	if r.ActivityName != "Reject" || r.StatusDetail != "rejected" || r.Comment != "no" {
		t.Errorf("rejection: %q %q %q", r.ActivityName, r.StatusDetail, r.Comment)
	}
}

// The validator itself refuses what breaks the class: a missing required
// attribute, a wrong type_uid, an unknown attribute, a bad enum value, a
// nested object missing its required field.
func TestValidateRefuses(t *testing.T) {
	good := encode(t, ocsf.FromDecision(decision.Record{Time: at, Host: "h", Port: 1, HTTPMethod: "GET", Decision: "allow"}, ocsf.Proxy))
	if err := ocsftest.Validate(good); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(good, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	for name, b := range map[string][]byte{
		"no time":          edit(func(m map[string]any) { delete(m, "time") }),
		"no severity":      edit(func(m map[string]any) { delete(m, "severity_id") }),
		"type_uid":         edit(func(m map[string]any) { m["type_uid"] = 400201 }),
		"category":         edit(func(m map[string]any) { m["category_uid"] = 6 }),
		"unknown attr":     edit(func(m map[string]any) { m["denial_id"] = "x" }),
		"activity enum":    edit(func(m map[string]any) { m["activity_id"] = 42; m["type_uid"] = 400242 }),
		"metadata.version": edit(func(m map[string]any) { m["metadata"].(map[string]any)["version"] = "1.7.0" }),
		"no product":       edit(func(m map[string]any) { delete(m["metadata"].(map[string]any), "product") }),
		"string time":      edit(func(m map[string]any) { m["time"] = "now" }),
		"no class":         edit(func(m map[string]any) { m["class_uid"] = 9999 }),
	} {
		if err := ocsftest.Validate(b); err == nil {
			t.Errorf("%s: validated %s", name, b)
		}
	}
}
