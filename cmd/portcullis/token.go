//go:build !proxyonly

package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

func newTokenCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("token", "Create, list and revoke admin, operator and sentry tokens",
		`  portcullis token create --role operator --name alice
  portcullis token create --role sentry --name urn:dpu:node-17
  portcullis token list
  portcullis token revoke alice`)
	cmd.AddCommand(newTokenCreateCmd(env), newTokenListCmd(env), newTokenRevokeCmd(env))
	return cmd
}

func newTokenCreateCmd(env *environment) *cobra.Command {
	var role, name string
	var sandboxes []string
	var ttl apiclient.DurationFlag
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "create --role admin|operator|sentry --name WHO [--sandboxes GLOB,…]",
		Short: "Create an admin, operator or sentry token and print it (shown once)",
		Long: `Create a token for a person or a system and print it. The token is shown
once; only its hash is stored. Operators read everything and decide
proposals; admins also manage sandboxes, tokens and policies.

A sentry token is a watchdog's: its name is the one event source it
reports as (a CloudEvents source such as urn:dpu:node-17 or sentry/node-17,
1 to 255 printable ASCII characters without spaces), and it may only write
that source's events (POST /v1/sentry/events, or SentryService; see
portcullis sentry --help). It reads nothing and cannot sign in to the
console. With --sandboxes it is limited to the sandboxes its watchdog
watches: name globs (support, team-a-*), one of which must match each
event's subject. An event about another sandbox, a quarantine above all,
is refused with its reason and audited (sentry.refused), and freezes
nothing. Without --sandboxes the token may report on every sandbox; one
source still freezes at most --quarantine-budget-per-source sandboxes per
five minutes (portcullis gateway --help).

With --ttl the token expires that long after it is made (90m, 12h, 30d)
and is refused as expired; token list shows when. Break-glass: with
--data-dir or --database-url, and no gateway or token, an admin token is
made in the gateway's store itself (which must exist), audited as by
cli:break-glass: the way back in when every admin token is lost.`,
		Example: `  portcullis token create --role operator --name alice
  portcullis token create --role admin --name ci -o json | jq -r .token
  portcullis token create --role sentry --name urn:dpu:node-17
  portcullis token create --role sentry --name urn:dpu:node-17 --sandboxes support,team-a-*
  portcullis token create --role admin --name rescue --data-dir ./portcullis-data`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return need(cmd, "name")
			}
			if role == "" {
				return need(cmd, "role")
			}
			if err := apitext.CheckTokenCreate(role, sandboxes); err != nil {
				return usagef("%v", err)
			}
			req := &portcullisv1.CreateTokenRequest{Name: name, Role: role, Sandboxes: sandboxes, Ttl: ttl.D}
			show := func(res *portcullisv1.CreateTokenResponse) error {
				apitext.TokenCreated(env.stdout, res)
				fmt.Fprintln(env.stderr, "The token is shown once; only its hash is stored.")
				return nil
			}
			if cmd.Flags().Changed("data-dir") || cmd.Flags().Changed("database-url") { // break-glass: the store itself, no gateway
				return sf.withExisting(cmd, env, func(ctx context.Context, st *store.Store) error {
					return answer(env, jsonOptions, show)(gateway.BreakGlassToken(ctx, st, req))
				})
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.CreateTokenResponse, error) {
				return api.Token.CreateToken(cmd.Context(), req)
			}, show)
		},
	}
	cmd.Flags().Var(&ttl, "ttl", "the token expires this long after it is made (`D`: 90m, 12h, 30d; default never)")
	sf.add(cmd) // break-glass: an admin token made in the gateway's store, offline
	cmd.Flags().StringVar(&role, "role", "", "`ROLE` of the token: admin, operator or sentry")
	cmd.Flags().StringVar(&name, "name", "", "who holds the token (`WHO`), unique; for sentry, the event source")
	cmd.Flags().StringSliceVar(&sandboxes, "sandboxes", nil, "sentry only: the sandboxes the watchdog watches, name globs (`GLOB,…`); events about others are refused (default: every sandbox)")
	return cmd
}

func newTokenListCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List tokens (never their values)",
		Example: `  portcullis token list`,
		Args:    args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.ListTokensResponse, error) {
				return api.Token.ListTokens(cmd.Context(), &portcullisv1.ListTokensRequest{})
			}, (*portcullisv1.ListTokensResponse).GetTokens, apitext.Tokens)
		},
	}
}

func newTokenRevokeCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:     "revoke NAME",
		Short:   "Revoke a token; it stops working at once",
		Example: `  portcullis token revoke alice`,
		Args:    args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return unary(env, func(api *apiclient.Client) (*portcullisv1.RevokeTokenResponse, error) {
				return api.Token.RevokeToken(cmd.Context(), &portcullisv1.RevokeTokenRequest{Name: a[0]})
			}, func(res *portcullisv1.RevokeTokenResponse) error {
				fmt.Fprintf(env.stdout, "token %s revoked\n", a[0])
				return nil
			})
		},
	}
}
