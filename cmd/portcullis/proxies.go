package main

import (
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func newProxiesCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("proxies", "Show the proxies the gateway knows and what they enforce",
		`  portcullis proxies list
  portcullis proxies list --sandbox orders -o json`)
	cmd.AddCommand(newProxiesListCmd(env))
	return cmd
}

func newProxiesListCmd(env *environment) *cobra.Command {
	var sandbox string
	cmd := &cobra.Command{
		Use:   "list [--sandbox NAME]",
		Short: "List proxies: sandbox, applied version, last ACK and NACK, lag",
		Long: `List every proxy that has subscribed to the gateway (any replica), or
those of one sandbox, with what each last reported:

  CONNECTED  whether its policy stream is open now
  APPLIED    the last version it acknowledged (ACK) and now enforces;
             "(current N)" when the sandbox has a newer version it has
             not acknowledged yet
  LAST ACK   when it last acknowledged a version
  LAST NACK  the last version it refused, with its reason (a proxy NACKs a
             version it cannot compile, once, and keeps the previous one)
  LAG        from the applied version's commit to its ACK
  DROPPED    its decision records that were lost: dropped by the proxy
             (its buffer was full); records over the sandbox's ingest rate
             limit at the gateway (portcullis gateway --decision-rate) are
             summarised, not lost

-o json prints every field, zero values included.`,
		Example: `  portcullis proxies list
  portcullis proxies list --sandbox orders
  portcullis proxies list -o json | jq '.proxies[] | select(.applied_version != .current_version)'`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The contract's fields (connected, last_nack_version, lag_ms, …)
			// are in the JSON even when zero.
			opts := jsonOptions
			opts.EmitDefaultValues = true
			return unaryWith(env, opts, func(api *apiclient.Client) (*portcullisv1.ListProxiesResponse, error) {
				return api.Proxy.ListProxies(cmd.Context(), &portcullisv1.ListProxiesRequest{Sandbox: sandbox})
			}, func(res *portcullisv1.ListProxiesResponse) error {
				return apitext.Proxies(env.stdout, res.GetProxies())
			})
		},
	}
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "only the proxies of sandbox `NAME`")
	return cmd
}
