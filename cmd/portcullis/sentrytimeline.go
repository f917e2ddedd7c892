//go:build !proxyonly

package main

import (
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func newSentryTimelineCmd(env *environment) *cobra.Command {
	var (
		since string
		limit int
	)
	cmd := &cobra.Command{
		Use:   "timeline SANDBOX [--since D] [--limit N]",
		Short: "Show what happened to a sandbox, in time order, with the policy version in force",
		Long: `Show one sandbox's timeline, oldest first: Sentry events and the actions
they caused, the proxies' decision records and ACKs, proposals and
approvals, policy versions and audit entries. Each line says the policy
version in force at that moment (V), what happened, and how it joins the
others: exactly by an id (denial_id, the policy hash an event names, the
version an action committed) or by a time window (a tool call a watchdog
saw and a proxy's record of the same tool). Derived findings show in
brackets: [drift] an event named a policy hash no proxy applied,
[unmediated] a watchdog saw a tool call no proxy decided.

--since keeps what happened at or after a time (RFC 3339) or within a
duration (default 24h); --limit keeps the newest N lines (default 500, at
most 5000).

With -o json: {"entries": [...]}.`,
		Example: `  portcullis sentry timeline orders
  portcullis sentry timeline orders --since 2h
  portcullis sentry timeline orders -o json | jq '.entries[] | select(.kind == "sentry_event")'`,
		Args: args("SANDBOX"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkLimit(cmd, limit, 5000); err != nil {
				return err
			}
			from, err := sinceTimestamp(since)
			if err != nil {
				return err
			}
			req := &portcullisv1.SentryTimelineRequest{Sandbox: a[0], Since: from, Limit: uint32(limit)}
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.SentryTimelineResponse, error) {
				return api.Sentry.Timeline(cmd.Context(), req)
			}, (*portcullisv1.SentryTimelineResponse).GetEntries, apitext.Timeline)
		},
	}
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "only what happened at or after `TIME` (RFC 3339), or within a duration (default 24h)")
	f.IntVar(&limit, "limit", 0, "show the newest `N` lines (default 500)")
	return cmd
}
