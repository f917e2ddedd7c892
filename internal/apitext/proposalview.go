package apitext

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Proposal writes p to w as propose prints it; full adds what
// `proposals show` shows: rationale, proposer, changes and the status's
// story.
func Proposal(w io.Writer, p *portcullisv1.Proposal, full bool) {
	kv := []string{
		"id", strconv.FormatUint(p.GetId(), 10),
		"status", Dash(p.GetStatus()),
		"base version", baseCell(p),
		"resulting hash", Dash(p.GetResultingHash()),
	}
	if full {
		kv = append(kv,
			"sandbox", Dash(p.GetSandbox()),
			"proposer", Dash(p.GetProposer()),
			"created", When(p.GetCreatedAt()),
			"updated", When(p.GetUpdatedAt()),
		)
		if p.GetDenialId() != "" {
			kv = append(kv, "from denial", p.GetDenialId())
		}
		if p.GetIdempotencyKey() != "" {
			kv = append(kv, "idempotency key", p.GetIdempotencyKey())
		}
		if p.GetStatusReason() != "" {
			kv = append(kv, "status reason", OneLine(p.GetStatusReason()))
		}
		if p.GetSupersededBy() != 0 {
			kv = append(kv, "superseded by", strconv.FormatUint(p.GetSupersededBy(), 10))
		}
		if p.GetRebaseError() != "" {
			kv = append(kv, "rebase error", OneLine(p.GetRebaseError()))
		}
		kv = append(kv, "rationale", OneLine(p.GetRationale()))
	}
	_ = Fields(w, kv...)
	if p.GetDeduplicated() {
		if p.GetStatus() == "pending" {
			fmt.Fprintln(w, "deduplicated: an identical proposal is already pending")
		} else {
			fmt.Fprintf(w, "deduplicated: this proposal was filed before (now %s)\n", Dash(p.GetStatus()))
		}
	}
	for _, id := range p.GetSupersedes() {
		fmt.Fprintf(w, "supersedes: proposal %d (pending, for the same endpoint and binary: this one replaces it in the queue)\n", id)
	}
	if full {
		if changes := p.GetChanges(); len(changes) > 0 {
			fmt.Fprintf(w, "changes (%d):\n", len(changes))
			for _, c := range changes {
				fmt.Fprintf(w, "  %s\n", ChangeLine(c))
			}
		}
		DefinitionChanges(w, p)
	}
	findings := p.GetFindings()
	if len(findings) == 0 {
		fmt.Fprintln(w, "findings: none")
		return
	}
	fmt.Fprintf(w, "findings (%d):\n", len(findings))
	for _, f := range findings {
		head := "  " + f.GetKind()
		if f.GetCredentialed() {
			head += " [credentialed]"
		}
		if where := findingWhere(f); where != "" {
			head += "  " + where
		}
		fmt.Fprintln(w, head)
		if f.GetDetail() != "" {
			fmt.Fprintf(w, "    %s\n", OneLine(f.GetDetail()))
		}
		if c := f.GetCounterexample(); c != nil {
			fmt.Fprintf(w, "    request: %s\n", requestLine(c))
		}
	}
}

// baseCell is "3 (sha256 3f2a…)", "-" when unset.
func baseCell(p *portcullisv1.Proposal) string {
	if p.GetBaseVersion() == 0 {
		return "-"
	}
	s := strconv.FormatUint(uint64(p.GetBaseVersion()), 10)
	if h := HashLabel(p.GetBaseHash()); h != "" {
		s += " (" + h + ")"
	}
	return s
}

// findingWhere locates a finding: "entry orders endpoint demo-mcp:8081/mcp rule rules[5]".
func findingWhere(f *portcullisv1.Finding) string {
	var parts []string
	for _, kv := range [][2]string{{"entry", f.GetEntry()}, {"endpoint", f.GetEndpoint()}, {"rule", f.GetRule()}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+" "+kv[1])
		}
	}
	return strings.Join(parts, " ")
}

// requestLine is a counterexample on one line: "BINARY → host:port METHOD
// /path?query mcp METHOD TOOL arguments {…}", the parts it has.
func requestLine(r *portcullisv1.ProvedRequest) string {
	var b strings.Builder
	bin := r.GetBinary()
	if bin == "" {
		bin = "any binary"
	}
	b.WriteString(bin)
	b.WriteString(" → ")
	b.WriteString(net.JoinHostPort(r.GetHost(), strconv.FormatUint(uint64(r.GetPort()), 10)))
	if a := r.GetAddr(); a != "" && a != r.GetHost() {
		b.WriteString(" (" + a + ")")
	}
	if m := r.GetHttpMethod(); m != "" {
		b.WriteString(" " + m)
	}
	if path := r.GetPath(); path != "" {
		b.WriteString(" " + path)
		if q := r.GetQuery(); q != "" {
			b.WriteString("?" + q)
		}
	}
	if m := r.GetMcpMethod(); m != "" {
		b.WriteString(" mcp " + m)
		if tool := r.GetTool(); tool != "" {
			b.WriteString(" " + tool)
		}
		if args := r.GetArguments(); args != "" {
			b.WriteString(" arguments " + OneLine(args))
		}
	}
	return b.String()
}

// ChangeLine renders one change: "+ path: summary", "- path: summary",
// "~ path: summary (before → after)".
func ChangeLine(c *portcullisv1.PolicyChange) string {
	switch c.GetKind() {
	case "added":
		return "+ " + Problem(c.GetPath(), first(c.GetSummary(), c.GetAfter()))
	case "removed":
		return "- " + Problem(c.GetPath(), first(c.GetSummary(), c.GetBefore()))
	default:
		what := c.GetBefore() + " → " + c.GetAfter()
		if c.GetSummary() != "" {
			what = c.GetSummary() + " (" + what + ")"
		}
		return "~ " + Problem(c.GetPath(), what)
	}
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
