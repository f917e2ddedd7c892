//go:build !proxyonly

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/sentry"
)

func newSentryCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("sentry", "Watchdog (Sentry) events: list them, their gaps, and the quarantines they caused",
		`  portcullis sentry events orders --type quarantine
  portcullis sentry gaps
  portcullis sentry actions --status held
  portcullis sentry timeline orders --since 2h
  portcullis sentry decide 7 --freeze --reason "confirmed by on-call"
  portcullis sentry key set urn:dpu:node-17 --public-key node-17.pub`)
	cmd.Long = `Out-of-band watchdogs ("Sentry") send events about sandboxes to the gateway
with a sentry token (portcullis token create --role sentry --name SOURCE),
as CloudEvents JSON to POST /v1/sentry/events or through SentryService; the
schema is Portcullis's own (docs/sentry-events.md). A quarantine or
boundary_breach event with processing remediate freezes its sandbox, within
the gateway's --quarantine-budget (past it the quarantine is held for an
operator) and never under --sentry-dry-run.

These commands are for operators and admins: events and gaps read what
was received, actions lists what the gateway did about remediating events,
timeline joins a sandbox's events with decisions, versions and audit,
decide answers a held one, and key (admin) registers the Ed25519 key a
source must sign its events with. Realistic event streams for tests and
demos come from go run ./bench/sentrysim (with a sentry token).`
	key := newGroupCmd("key", "Register or remove the Ed25519 key a source signs its events with (admin)",
		`  portcullis sentry key set urn:dpu:node-17 --public-key node-17.pub
  portcullis sentry key delete urn:dpu:node-17`)
	key.AddCommand(newSentryKeySetCmd(env), newSentryKeyDeleteCmd(env))
	cmd.AddCommand(
		newSentryEventsCmd(env),
		newSentryGapsCmd(env),
		newSentryActionsCmd(env),
		newSentryDecideCmd(env),
		newSentryTimelineCmd(env),
		key,
	)
	return cmd
}

// optionalArg accepts no positional argument or one, named name.
func optionalArg(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		switch {
		case len(got) > 1:
			return usagef("%s: unexpected argument %q", cmd.CommandPath(), got[1])
		case len(got) == 1 && strings.TrimSpace(got[0]) == "":
			return usagef("%s: %s is empty", cmd.CommandPath(), name)
		}
		return nil
	}
}

// firstArg is the optional argument, "" when absent.
func firstArg(a []string) string {
	if len(a) == 0 {
		return ""
	}
	return a[0]
}

func newSentryEventsCmd(env *environment) *cobra.Command {
	var (
		source, typ, since string
		limit              int
	)
	cmd := &cobra.Command{
		Use:   "events [SANDBOX] [--source S] [--type T] [--since D] [--limit N]",
		Short: "List the Sentry events received, oldest first",
		Long: `List the Sentry events the gateway stored, oldest first, one line each:
when the watchdog saw it, source, sequence, id, type, subject (the sandbox),
severity, processing (store_only or remediate) and flags (what was kept
without being understood: unknown_type, unknown_field, extension;
time_defaulted: sent without a time, given the time received).

SANDBOX keeps the events about one sandbox; --source one watchdog's;
--type one type (a class name such as quarantine stands for
portcullis.sentry.v1.quarantine); --since those that happened at or after
a time (RFC 3339) or within a duration (90m, 24h, 7d). --limit keeps the
newest N (default 100, at most 1000).

With -o json: {"events": [...]}, each event with the document as received.`,
		Example: `  portcullis sentry events
  portcullis sentry events orders --type quarantine --since 24h
  portcullis sentry events --source urn:dpu:node-17 -o json | jq -r '.events[].document'`,
		Args: optionalArg("SANDBOX"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkLimit(cmd, limit, maxLogLimit); err != nil {
				return err
			}
			from, err := sinceTimestamp(since)
			if err != nil {
				return err
			}
			req := &portcullisv1.ListSentryEventsRequest{Sandbox: firstArg(a), Source: source, Type: sentry.TypeOf(typ), Since: from, Limit: uint32(limit)}
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.ListSentryEventsResponse, error) {
				return api.Sentry.ListEvents(cmd.Context(), req)
			}, (*portcullisv1.ListSentryEventsResponse).GetEvents, apitext.SentryEvents)
		},
	}
	f := cmd.Flags()
	f.StringVar(&source, "source", "", "only the events of `SOURCE`")
	f.StringVar(&typ, "type", "", "only events of `TYPE` (a class such as quarantine, or a full type)")
	f.StringVar(&since, "since", "", "only events at or after `TIME` (RFC 3339), or within a duration (24h, 7d)")
	f.IntVar(&limit, "limit", 0, "show the newest `N` events (default 100)")
	return cmd
}

// sinceTimestamp is --since as a request's bound (apiclient.SinceTimestamp).
func sinceTimestamp(since string) (*timestamppb.Timestamp, error) {
	t, err := apiclient.SinceTimestamp(since, time.Now())
	if err != nil {
		err = asUsage(err)
	}
	return t, err
}

// parseSince reads --since (apiclient.Since).
func parseSince(s string, now time.Time) (time.Time, error) { return timeFlag(apiclient.Since(s, now)) }

func newSentryGapsCmd(env *environment) *cobra.Command {
	var source string
	cmd := &cobra.Command{
		Use:   "gaps [--source S]",
		Short: "Show each source's acknowledged sequence and the sequences still missing",
		Long: `Show, per event source, the acknowledged sequence (every event up to it is
stored) and the gaps above it: ranges of sequences not received yet, as
"6-7, 10". A gap closes by itself when its events arrive. --source shows
one source.

With -o json: {"sources": [...]}.`,
		Example: `  portcullis sentry gaps
  portcullis sentry gaps --source urn:dpu:node-17 -o json`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("source") && strings.TrimSpace(source) == "" {
				return usagef("--source is empty")
			}
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.ListSentryGapsResponse, error) {
				return api.Sentry.ListGaps(cmd.Context(), &portcullisv1.ListSentryGapsRequest{Source: source})
			}, (*portcullisv1.ListSentryGapsResponse).GetSources, apitext.SentryGaps)
		},
	}
	cmd.Flags().StringVar(&source, "source", "", "only `SOURCE`")
	return cmd
}

func newSentryActionsCmd(env *environment) *cobra.Command {
	var (
		statuses []string
		limit    int
	)
	cmd := &cobra.Command{
		Use:   "actions [SANDBOX] [--status S]... [--limit N]",
		Short: "List what the gateway did about remediating Sentry events (the incidents)",
		Long: `List the incidents, newest first: what the gateway did about each
remediating Sentry event (a quarantine or boundary_breach with processing
remediate). Per action: its id (what sentry decide takes), the sandbox, the
status, the event (source and id), the deny-all version it committed, the
time from ingest to the last proxy's ACK of that version (when every
connected proxy applied it) and the reason.

Statuses: frozen (the event froze the sandbox), held (the quarantine budget
was spent: nothing was done, an operator decides), dry_run (the gateway
runs with --sentry-dry-run), stale (older than --sentry-max-age: nothing
was done), already_frozen, failed (the reason says why),
and an operator's answer to a held one: applied (frozen after all) or
dismissed.

SANDBOX keeps one sandbox's actions; --status (repeatable) those with the
statuses given; --limit the newest N (default 100, at most 1000).

With -o json: {"actions": [...]}.`,
		Example: `  portcullis sentry actions
  portcullis sentry actions --status held
  portcullis sentry actions orders -o json | jq '.actions[0]'`,
		Args: optionalArg("SANDBOX"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := apitext.CheckSentryStatuses(statuses); err != nil {
				return usagef("%v", err)
			}
			if err := checkLimit(cmd, limit, maxLogLimit); err != nil {
				return err
			}
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.ListSentryActionsResponse, error) {
				return api.Sentry.ListActions(cmd.Context(), &portcullisv1.ListSentryActionsRequest{
					Sandbox: firstArg(a), Status: statuses, Limit: uint32(limit),
				})
			}, (*portcullisv1.ListSentryActionsResponse).GetActions, apitext.SentryActions)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&statuses, "status", nil, "only actions with status `S` (held, frozen, …; repeatable)")
	f.IntVar(&limit, "limit", 0, "show the newest `N` actions (default 100)")
	return cmd
}

func newSentryDecideCmd(env *environment) *cobra.Command {
	var (
		freeze, dismiss bool
		reason          string
	)
	cmd := &cobra.Command{
		Use:   "decide ID (--freeze | --dismiss) --reason R",
		Short: "Answer a held quarantine: freeze the sandbox after all, or dismiss it",
		Long: `Answer a quarantine the budget held (status held; see sentry actions
--status held), as an operator or admin: --freeze freezes the sandbox now
(a deny-all version committed and pushed, proposals refused; the action
becomes applied), --dismiss leaves the sandbox alone (dismissed). --reason
is required and recorded. An action that is not held is a conflict (exit
3). Prints the outcome; with -o json the DecideSentryActionResponse.`,
		Example: `  portcullis sentry decide 7 --freeze --reason "confirmed by on-call, incident 42"
  portcullis sentry decide 8 --dismiss --reason "false positive: load test"`,
		Args: args("ID"),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, decision, err := apitext.SentryDecision(a[0], freeze, dismiss, reason)
			if err != nil {
				return usagef("%v", err)
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.DecideSentryActionResponse, error) {
				return api.Sentry.DecideAction(cmd.Context(), &portcullisv1.DecideSentryActionRequest{Id: id, Decision: decision, Reason: reason})
			}, func(res *portcullisv1.DecideSentryActionResponse) error {
				return apitext.SentryDecided(env.stdout, res.GetAction())
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&freeze, "freeze", false, "freeze the sandbox now")
	f.BoolVar(&dismiss, "dismiss", false, "leave the sandbox alone")
	f.StringVar(&reason, "reason", "", "why (`TEXT`, required; recorded)")
	return cmd
}

func newSentryKeySetCmd(env *environment) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "set SOURCE --public-key FILE",
		Short: "Register the Ed25519 public key SOURCE signs its events with",
		Long: `Register the Ed25519 public key of an event source (admin). From then on
the gateway refuses the source's events that are not signed by it (the
signature is described in docs/sentry-events.md). Setting a key again
replaces it.

FILE (- reads stdin) holds the public key as the base64 text of its 32
bytes, or as a PEM "PUBLIC KEY" block (PKIX, as 'openssl pkey -pubout'
writes it). Prints the key's fingerprint (SHA-256 of the 32 bytes, hex);
with -o json the SetSentrySourceKeyResponse.`,
		Example: `  openssl genpkey -algorithm ed25519 -out node-17.key
  openssl pkey -in node-17.key -pubout -out node-17.pub
  portcullis sentry key set urn:dpu:node-17 --public-key node-17.pub`,
		Args: args("SOURCE"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if file == "" {
				return need(cmd, "public-key")
			}
			data, err := env.readInput(file)
			if err != nil {
				return err
			}
			pub, err := sentry.ParsePublicKey(data)
			if err != nil {
				return inputErr(fmt.Errorf("%s: %w", displayName(file), err))
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.SetSentrySourceKeyResponse, error) {
				return api.Sentry.SetSourceKey(cmd.Context(), &portcullisv1.SetSentrySourceKeyRequest{Source: a[0], PublicKey: pub})
			}, func(res *portcullisv1.SetSentrySourceKeyResponse) error { return apitext.SentryKeySet(env.stdout, res) })
		},
	}
	cmd.Flags().StringVar(&file, "public-key", "", "`FILE` holding the Ed25519 public key: base64 of its 32 bytes, or PEM (PKIX); - reads stdin")
	return cmd
}

func newSentryKeyDeleteCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "delete SOURCE",
		Short: "Remove a source's key: its events need no signature any more",
		Long: `Remove the Ed25519 key registered for an event source (admin); from then on
its events are taken unsigned. A source without a key is not found (exit 1).`,
		Example: `  portcullis sentry key delete urn:dpu:node-17`,
		Args:    args("SOURCE"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return unary(env, func(api *apiclient.Client) (*portcullisv1.DeleteSentrySourceKeyResponse, error) {
				return api.Sentry.DeleteSourceKey(cmd.Context(), &portcullisv1.DeleteSentrySourceKeyRequest{Source: a[0]})
			}, func(*portcullisv1.DeleteSentrySourceKeyResponse) error {
				return apitext.SentryKeyDeleted(env.stdout, a[0])
			})
		},
	}
}
