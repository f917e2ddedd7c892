package apitext

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// The list commands' tables: aligned columns under a header, a row per
// message. Values a proxy, an agent, a watchdog or an MCP server chose
// are quoted (Field) when they could forge a line or reach the terminal.

// Cut lengths of the free-text columns.
const (
	maxRationaleCell = 48 // a proposal's rationale
	maxReasonCell    = 60 // a Sentry action's reason
)

// Table writes a table to w: the header, then each row rows adds (a
// table of values this package has no message for).
func Table(w io.Writer, rows func(add func(cells ...string)), header ...string) error {
	return table(w, rows, header...)
}

// table writes a table to w: the header, then each row rows adds.
func table(w io.Writer, rows func(add func(cells ...string)), header ...string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	add := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	add(header...)
	rows(add)
	return tw.Flush()
}

// Sandboxes is sandbox list's table.
func Sandboxes(w io.Writer, sandboxes []*portcullisv1.Sandbox) error {
	return table(w, func(add func(...string)) {
		for _, s := range sandboxes {
			frozen := "-"
			if s.GetFrozen() {
				frozen = "yes"
			}
			add(s.GetName(), VersionCell(s.GetCurrentVersion()), Dash(ShortHash(s.GetCurrentHash())),
				When(s.GetCreatedAt()), Dash(s.GetCreatedBy()), frozen)
		}
	}, "NAME", "VERSION", "HASH", "CREATED", "BY", "FROZEN")
}

// Tokens is token list's table.
func Tokens(w io.Writer, tokens []*portcullisv1.Token) error {
	return table(w, func(add func(...string)) {
		for _, t := range tokens {
			// A sandbox token's sandbox, or the globs a sentry token is
			// limited to.
			scope := t.GetSandbox()
			if len(t.GetSandboxes()) > 0 {
				scope = strings.Join(t.GetSandboxes(), ",")
			}
			add(t.GetName(), t.GetRole(), Dash(scope), When(t.GetCreatedAt()),
				Dash(t.GetCreatedBy()), When(t.GetLastUsedAt()), When(t.GetExpiresAt()), When(t.GetRevokedAt()))
		}
	}, "NAME", "ROLE", "SANDBOX", "CREATED", "BY", "LAST USED", "EXPIRES", "REVOKED")
}

// TokenCreated is token create's answer: the token, shown once, and when
// it expires if it does.
func TokenCreated(w io.Writer, res *portcullisv1.CreateTokenResponse) {
	fmt.Fprintf(w, "%s token %s created\n", res.GetRole(), res.GetName())
	fmt.Fprintf(w, "token:  %s\n", res.GetToken())
	if res.GetExpiresAt() != nil {
		fmt.Fprintf(w, "expires: %s\n", When(res.GetExpiresAt()))
	}
}

// Proxies is proxies list's table.
func Proxies(w io.Writer, proxies []*portcullisv1.ProxyStatus) error {
	return table(w, func(add func(...string)) {
		for _, p := range proxies {
			add(p.GetSandbox(), p.GetProxyId(), YesNo(p.GetConnected()), AppliedCell(p),
				When(p.GetLastAckAt()), NackCell(p), LagCell(p), fmt.Sprint(p.GetDecisionsDropped()))
		}
	}, "SANDBOX", "PROXY", "CONNECTED", "APPLIED", "LAST ACK", "LAST NACK", "LAG", "DROPPED")
}

// PolicyVersions is policy history's table.
func PolicyVersions(w io.Writer, versions []*portcullisv1.PolicyVersion) error {
	return table(w, func(add func(...string)) {
		for _, v := range versions {
			add(fmt.Sprint(v.GetVersion()), ShortHash(v.GetHash()), When(v.GetCreatedAt()), Dash(v.GetAuthor()), Provenance(v))
		}
	}, "VERSION", "HASH", "CREATED", "AUTHOR", "SOURCE")
}

// Tools is sandbox tools' table: each tool's definitions, the current
// one first.
func Tools(w io.Writer, tools []*portcullisv1.SandboxTool) error {
	return table(w, func(add func(...string)) {
		for _, t := range tools {
			// A server chose the tool names, and the agent the hosts.
			endpoint := Field(t.GetHost() + ":" + strconv.FormatUint(uint64(t.GetPort()), 10) + t.GetPath())
			for i, d := range t.GetDefinitions() {
				state := "past"
				if i == 0 {
					state = "current"
				}
				add(endpoint, Field(t.GetTool()), Dash(d.GetFingerprint()), state,
					When(d.GetFirstSeen()), When(d.GetLastSeen()), Field(Dash(d.GetProxyId())))
			}
		}
	}, "ENDPOINT", "TOOL", "DEFINITION", "", "FIRST SEEN", "LAST SEEN", "PROXY")
}

// Audit is audit list's table.
func Audit(w io.Writer, entries []*portcullisv1.AuditEntry) error {
	return table(w, func(add func(...string)) {
		for _, e := range entries {
			add(strconv.FormatInt(e.GetSeq(), 10), When(e.GetTime()), Field(Dash(e.GetActor())),
				Field(e.GetAction()), Field(Dash(e.GetSandbox())), Field(Dash(e.GetTarget())), AuditDetail(e))
		}
	}, "SEQ", "TIME", "ACTOR", "ACTION", "SANDBOX", "TARGET", "DETAIL")
}

// Proposals is proposals list's table; a sandbox's own view (not
// operator) has no sandbox or approvals column.
func Proposals(w io.Writer, proposals []*portcullisv1.Proposal, operator bool) error {
	header := []string{"ID", "SANDBOX", "STATUS", "APPROVALS", "CREATED", "FINDINGS", "RATIONALE"}
	if !operator {
		header = []string{"ID", "STATUS", "CREATED", "FINDINGS", "RATIONALE"}
	}
	return table(w, func(add func(...string)) {
		for _, p := range proposals {
			id, rationale := strconv.FormatUint(p.GetId(), 10), Dash(Clip(p.GetRationale(), maxRationaleCell))
			if !operator {
				add(id, Dash(p.GetStatus()), When(p.GetCreatedAt()), FindingsCell(p.GetFindings()), rationale)
				continue
			}
			add(id, Dash(p.GetSandbox()), Dash(p.GetStatus()), ApprovalsCell(p),
				When(p.GetCreatedAt()), FindingsCell(p.GetFindings()), rationale)
		}
	}, header...)
}

// SentryEvents is sentry events' table.
func SentryEvents(w io.Writer, events []*portcullisv1.StoredSentryEvent) error {
	return table(w, func(add func(...string)) {
		for _, e := range events {
			seq := "-"
			if e.GetSequence() != 0 {
				seq = strconv.FormatUint(e.GetSequence(), 10)
			}
			flags := "-"
			if len(e.GetFlags()) > 0 {
				flags = Field(strings.Join(e.GetFlags(), ","))
			}
			add(When(e.GetTime()), Field(e.GetSource()), seq, Field(e.GetId()), Field(e.GetType()), Field(Dash(e.GetSubject())),
				Field(Dash(e.GetSeverity())), Field(Dash(e.GetProcessing())), flags)
		}
	}, "TIME", "SOURCE", "SEQ", "ID", "TYPE", "SUBJECT", "SEVERITY", "PROCESSING", "FLAGS")
}

// SentryGaps is sentry gaps' table.
func SentryGaps(w io.Writer, sources []*portcullisv1.SourceAck) error {
	return table(w, func(add func(...string)) {
		for _, s := range sources {
			add(Field(s.GetSource()), strconv.FormatUint(s.GetAckedSequence(), 10), GapsCell(s.GetGaps(), s.GetMoreGaps()))
		}
	}, "SOURCE", "ACKED", "GAPS")
}

// SentryActions is sentry actions' table.
func SentryActions(w io.Writer, actions []*portcullisv1.SentryAction) error {
	return table(w, func(add func(...string)) {
		for _, x := range actions {
			add(strconv.FormatInt(x.GetId(), 10), Field(Dash(x.GetSandbox())), Dash(x.GetStatus()),
				Field(x.GetSource()), Field(x.GetEventId()), VersionCell(x.GetVersion()), IngestToAck(x),
				Dash(Clip(x.GetReason(), maxReasonCell)))
		}
	}, "ID", "SANDBOX", "STATUS", "SOURCE", "EVENT", "VERSION", "INGEST TO ACK", "REASON")
}

// Timeline is sentry timeline's table: what happened to a sandbox, each
// line's flags and links after its summary.
func Timeline(w io.Writer, entries []*portcullisv1.TimelineEntry) error {
	return table(w, func(add func(...string)) {
		for _, e := range entries {
			what := e.GetSummary()
			for _, f := range e.GetFlags() {
				what += " [" + f + "]"
			}
			if len(e.GetLinks()) > 0 {
				what += " → " + strings.Join(e.GetLinks(), "; ")
			}
			// Watchdogs and agents chose parts of it: quoted whole.
			add(When(e.GetTime()), VersionCell(e.GetPolicyVersion()), e.GetKind(), Printable(what))
		}
	}, "TIME", "V", "KIND", "WHAT")
}

// Sandbox is sandbox get's fields: the sandbox, and why and by whom it
// is frozen.
func Sandbox(w io.Writer, s *portcullisv1.Sandbox) error {
	kv := []string{
		"name", s.GetName(),
		"version", VersionCell(s.GetCurrentVersion()),
		"hash", Dash(s.GetCurrentHash()),
		"created", When(s.GetCreatedAt()),
		"by", Dash(s.GetCreatedBy()),
		"boundary", BoundaryCell(s),
		"credentialed", CredentialedCell(s),
		"providers", ListOrNone(s.GetProviders()),
		"frozen", YesNo(s.GetFrozen()),
	}
	if s.GetFrozen() {
		kv = append(kv, "frozen reason", Dash(OneLine(s.GetFrozenReason())))
		if id := s.GetQuarantineEventId(); id != "" {
			// A watchdog named these: quoted if they could forge a line.
			kv = append(kv, "quarantine event", Field(id)+" from "+Field(s.GetQuarantineSource()))
		}
		kv = append(kv, "frozen by", Dash(s.GetFrozenBy()), "frozen at", When(s.GetFrozenAt()))
	}
	return Fields(w, kv...)
}

// tokenRoles are the roles a token create may ask for; sandbox tokens come
// from sandbox create.
var tokenRoles = []string{"admin", "operator", "sentry"}

// CheckTokenCreate refuses, before any call, a token create's role and
// --sandboxes that no gateway would take.
func CheckTokenCreate(role string, sandboxes []string) error {
	if !slices.Contains(tokenRoles, role) {
		return fmt.Errorf("--role must be admin, operator or sentry, got %q (sandbox tokens come from sandbox create)", role)
	}
	if len(sandboxes) > 0 && role != "sentry" {
		return fmt.Errorf("--sandboxes limits a sentry token; a %s token is not limited to sandboxes", role)
	}
	return nil
}
