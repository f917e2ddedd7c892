package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"connectrpc.com/connect/v2"
	"github.com/spf13/cobra"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// maxLogLimit is the most records the gateway returns at once.
const maxLogLimit = 1000

// checkLimit refuses a --limit the gateway would not take: from 1 to max.
func checkLimit(cmd *cobra.Command, limit, max int) error {
	if cmd.Flags().Changed("limit") && (limit < 1 || limit > max) {
		return usagef("--limit must be from 1 to %d, got %d", max, limit)
	}
	return nil
}

func newLogsCmd(env *environment) *cobra.Command {
	var (
		tail     bool
		decision string
		limit    int
		denialID string
	)
	cmd := &cobra.Command{
		Use:   "logs SANDBOX [--tail] [--decision allow|deny|audit|rate_limited] [--limit N]",
		Short: "Show the decision records the sandbox's proxies shipped",
		Long: `Show the decision records the sandbox's proxies shipped to the gateway,
oldest first, one line each: time, decision, calling binary, request
(METHOD host:port/path), MCP method and tool, the rule that allowed it or
the reason it was denied, the policy version in force, and for a denial its
denial_id (what 'portcullis propose --from-denial ID' takes). A
rate_limited record is a tools/call the policy allowed but its rule's
rate_limit refused (429); its id names the record, and no proposal is
made from it.

Without --tail the newest --limit records are shown (default 100, at most
1000). With --tail the newest --limit records (default 10) are shown, then
every new one as the gateway stores it, until interrupted; --timeout does
not apply. With -o json: the ListDecisionsResponse, or with --tail one
StoredDecision JSON object per line.`,
		Example: `  portcullis logs orders
  portcullis logs orders --decision deny --limit 20
  portcullis logs orders --decision rate_limited
  portcullis logs orders --tail
  portcullis logs orders --tail --decision deny -o json | jq -r .record.denial_id
  portcullis logs orders --denial-id dn_0123456789abcdef -o json`,
		Args: args("SANDBOX"),
		RunE: func(cmd *cobra.Command, a []string) error {
			switch decision {
			case "", "allow", "deny", "audit", "rate_limited":
			default:
				return usagef("--decision must be allow, deny, audit or rate_limited, got %q", decision)
			}
			if err := checkLimit(cmd, limit, maxLogLimit); err != nil {
				return err
			}
			if tail && denialID != "" {
				return usagef("give --tail or --denial-id, not both")
			}
			api, err := env.client()
			if err != nil {
				return err
			}
			if tail {
				return tailLogs(cmd, env, api, &portcullisv1.TailDecisionsRequest{
					Sandbox: a[0], Decision: decision, Backlog: uint32(limit),
				})
			}
			res, err := api.decision.ListDecisions(cmd.Context(), &portcullisv1.ListDecisionsRequest{
				Sandbox: a[0], Decision: decision, Limit: uint32(limit), DenialId: denialID,
			})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(res)
			}
			for _, d := range res.GetDecisions() {
				fmt.Fprintln(env.stdout, decisionLine(d))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&tail, "tail", false, "keep printing new records as they arrive, until interrupted")
	f.StringVar(&decision, "decision", "", "only records with this `DECISION`: allow, deny, audit or rate_limited")
	f.IntVar(&limit, "limit", 0, "show the newest `N` records (default 100; with --tail, 10 before the new ones)")
	f.StringVar(&denialID, "denial-id", "", "only the denial with this `ID`")
	return cmd
}

// tailLogs prints the records of a TailDecisions stream until the
// command's context ends (interrupt: success) or the stream does.
func tailLogs(cmd *cobra.Command, env *environment, api *apiClients, req *portcullisv1.TailDecisionsRequest) error {
	ctx := cmd.Context()
	st, err := api.stream.TailDecisions(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer st.Close()
	for {
		d, err := st.Receive()
		switch {
		case ctx.Err() != nil:
			return nil // interrupted: the normal end of a tail
		case errors.Is(err, io.EOF):
			return connect.NewError(connect.CodeUnavailable, "the gateway ended the tail (shutting down?)")
		case err != nil:
			return err
		}
		if env.jsonOutput() {
			err = env.printJSONLine(d)
		} else {
			_, err = fmt.Fprintln(env.stdout, decisionLine(d))
		}
		if err != nil {
			return err
		}
	}
}

// decisionLine is one record as a line:
//
//	2026-01-02T03:04:05Z deny  /usr/bin/curl POST api.example.com:443/v1/refunds mcp=tools/call tool=refund_order reason="…" policy=3 denial_id=…
//
// A denial a machine acts on also carries its reason_code, and one by a
// pinned tool definition the fingerprint seen (tool_definition=sha256:…,
// or - when the proxy could verify none). A summary of a flood of similar
// decisions ends in summary=N until=TIME first_denial_id=… last_denial_id=…
// (its time is the first one's); a record whose long fields were cut
// lists each as cut=FIELD:LENGTH:sha256:HEX.
//
// Everything a proxy shipped is shown quoted when it holds white space or
// anything unprintable: the agent chooses hosts, paths and tool names, and
// must not be able to forge lines or send escape sequences to a terminal.
func decisionLine(d *portcullisv1.StoredDecision) string {
	r := d.GetRecord()
	parts := []string{when(r.GetTime()), fmt.Sprintf("%-5s", logField(r.GetDecision())), logField(dash(r.GetBinary()))}
	if m := r.GetHttpMethod(); m != "" {
		parts = append(parts, logField(m))
	}
	parts = append(parts, logField(requestTarget(r)))
	if m := r.GetMcpMethod(); m != "" {
		parts = append(parts, "mcp="+logField(m))
	}
	if t := r.GetTool(); t != "" {
		parts = append(parts, "tool="+logField(t))
	}
	// An allow names the rule that allowed it; a denial (or an audited
	// would-be denial) says why.
	if showRule := r.GetReason() == "" || (r.GetDecision() == "allow" && r.GetRule() != ""); showRule {
		if e := r.GetEntry(); e != "" {
			parts = append(parts, "entry="+logField(e))
		}
		if rule := r.GetRule(); rule != "" {
			parts = append(parts, "rule="+logField(rule))
		}
	} else {
		parts = append(parts, "reason="+logField(r.GetReason()))
	}
	if v := r.GetPolicyVersion(); v != "" {
		parts = append(parts, "policy="+logField(v))
	} else {
		parts = append(parts, "policy=none")
	}
	if r.GetVersionProbe() {
		parts = append(parts, "version_probe")
	}
	if c := r.GetReasonCode(); c != "" {
		parts = append(parts, "reason_code="+logField(c))
	}
	if c := r.GetReasonCode(); c != "" || r.GetToolDefinition() != "" {
		parts = append(parts, "tool_definition="+logField(dash(r.GetToolDefinition())))
	}
	if id := r.GetDenialId(); id != "" {
		parts = append(parts, "denial_id="+logField(id))
	}
	if n := r.GetSummaryCount(); n > 0 {
		parts = append(parts, fmt.Sprintf("summary=%d until=%s", n, when(r.GetSummaryLast())))
		if id := r.GetSummaryFirstDenialId(); id != "" {
			parts = append(parts, "first_denial_id="+logField(id))
		}
		if id := r.GetSummaryLastDenialId(); id != "" {
			parts = append(parts, "last_denial_id="+logField(id))
		}
	}
	for _, c := range r.GetCuts() {
		parts = append(parts, fmt.Sprintf("cut=%s:%d:sha256:%s", logField(c.GetField()), c.GetLength(), logField(c.GetSha256())))
	}
	return strings.Join(parts, " ")
}

// requestTarget is host:port/path ("-" when the record names no
// destination).
func requestTarget(r *portcullisv1.DecisionRecord) string {
	host := r.GetHost()
	if host == "" {
		host = r.GetAddr()
	}
	if host == "" {
		host = "-"
	}
	if p := r.GetPort(); p != 0 && r.GetHost() != "" {
		host += ":" + strconv.FormatUint(uint64(p), 10)
	}
	return host + r.GetPath()
}

// logField is s as is when it is one printable word, else Go-quoted.
func logField(s string) string {
	for _, c := range s {
		if c == '"' || c == '\\' || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}
