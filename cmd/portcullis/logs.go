package main

import (
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect/v2"
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apitext"
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
				fmt.Fprintln(env.stdout, apitext.DecisionLine(d))
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
			_, err = fmt.Fprintln(env.stdout, apitext.DecisionLine(d))
		}
		if err != nil {
			return err
		}
	}
}
