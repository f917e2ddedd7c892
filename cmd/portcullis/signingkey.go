package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/store"
)

// newSigningKeyCmd is `portcullis signing-key list|rotate`: operations on
// the gateway's key chain, run against its database like migrate.
func newSigningKeyCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("signing-key", "Show or rotate the key the gateway signs policy versions with",
		`  portcullis signing-key list --database-url postgres://…
  portcullis signing-key rotate --database-url postgres://…`)
	list := &cobra.Command{
		Use:   "list",
		Short: "Print the signing key chain, oldest first; the last key signs",
		Long: `Print the gateway's signing keys, oldest first, in the form
'portcullis proxy --gateway-key' takes. The last one signs new versions;
each one after the first is endorsed by the one before it.`,
		Example: `  portcullis signing-key list --data-dir ./portcullis-data`,
		Args:    cobra.NoArgs,
	}
	withStore(list, env, func(ctx context.Context, st *store.Store, _ string) error {
		keys, err := gateway.SigningKeyChain(ctx, st)
		if err != nil {
			return err
		}
		for _, k := range keys {
			fmt.Fprintln(env.stdout, k)
		}
		return nil
	})
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Add a new signing key, endorsed by the current one",
		Long: `Add a signing key to the chain, endorsed by the current key, and make
it the one that signs. Running gateways pick it up within their version
check interval (5 s); proxies follow the endorsement on the next version
they receive and pin the new key, refusing versions signed by the old one
from then on. Proxies started with --gateway-key set to an old key keep
working: the chain leads from it to the new key.`,
		Example: `  portcullis signing-key rotate --database-url postgres://postgres@127.0.0.1:5432/portcullis`,
		Args:    cobra.NoArgs,
	}
	withStore(rotate, env, func(ctx context.Context, st *store.Store, _ string) error {
		id, err := gateway.RotateSigningKey(ctx, st, "cli:signing-key rotate")
		if err != nil {
			return err
		}
		keys, err := gateway.SigningKeyChain(ctx, st)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "new signing key %s: %s\n", id, keys[len(keys)-1])
		return nil
	})
	cmd.AddCommand(list, rotate)
	return cmd
}
