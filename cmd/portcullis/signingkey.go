package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/gateway"
)

// newSigningKeyCmd is `portcullis signing-key list|rotate`: operations on
// the gateway's key chain, run against its database like migrate.
func newSigningKeyCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("signing-key", "Show or rotate the key the gateway signs policy versions with",
		`  portcullis signing-key list --database-url postgres://…
  portcullis signing-key rotate --database-url postgres://…`)
	cmd.AddCommand(newSigningKeyListCmd(env), newSigningKeyRotateCmd(env))
	return cmd
}

func newSigningKeyListCmd(env *environment) *cobra.Command {
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Print the signing key chain, oldest first; the last key signs",
		Long: `Print the gateway's signing keys, oldest first, in the form
'portcullis proxy --gateway-key' takes. The last one signs new versions;
each one after the first is endorsed by the one before it.`,
		Example: `  portcullis signing-key list --data-dir ./portcullis-data`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			log, err := newLogger(env)
			if err != nil {
				return err
			}
			st, _, err := sf.open(cmd.Context(), env, log)
			if err != nil {
				return err
			}
			defer st.Close()
			keys, err := gateway.SigningKeyChain(cmd.Context(), st)
			if err != nil {
				return err
			}
			for _, k := range keys {
				fmt.Fprintln(env.stdout, k)
			}
			return nil
		},
	}
	sf.add(cmd)
	return cmd
}

func newSigningKeyRotateCmd(env *environment) *cobra.Command {
	var sf storeFlags
	cmd := &cobra.Command{
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
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			log, err := newLogger(env)
			if err != nil {
				return err
			}
			st, _, err := sf.open(cmd.Context(), env, log)
			if err != nil {
				return err
			}
			defer st.Close()
			id, err := gateway.RotateSigningKey(cmd.Context(), st, "cli:signing-key rotate")
			if err != nil {
				return err
			}
			keys, err := gateway.SigningKeyChain(cmd.Context(), st)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.stdout, "new signing key %s: %s\n", id, keys[len(keys)-1])
			return nil
		},
	}
	sf.add(cmd)
	return cmd
}
