//go:build !proxyonly

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/internal/signing"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// newSigningKeyCmd is `portcullis signing-key list|rotate`: the gateway's
// key chain, read from a running gateway (list) or from its database.
func newSigningKeyCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("signing-key", "Show or rotate the key the gateway signs policy versions with",
		`  portcullis signing-key list --gateway https://gateway.example:7070
  portcullis signing-key list --data-dir ./portcullis-data
  portcullis signing-key rotate --database-url postgres://…`)
	var sf storeFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "Print the signing key chain, oldest first; the last key signs",
		Long: `Print the gateway's signing keys, oldest first, in the form
'portcullis proxy --gateway-key' takes. The last one signs new versions;
each one after the first is endorsed by the one before it.

With --gateway (or PORTCULLIS_GATEWAY) the keys come from that gateway,
with any token but a sentry one. With --data-dir or --database-url they
are read from the gateway's store, which must exist: nothing is created
(a key made here would not be the gateway's). With neither, the store in
the default data dir is read if there is one.`,
		Example: `  portcullis signing-key list --gateway https://gateway.example:7070 --token-file admin.token
  portcullis signing-key list --data-dir ./portcullis-data -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			show := func(res *portcullisv1.ListSigningKeysResponse) error {
				if env.jsonOutput() {
					return env.printJSON(res)
				}
				for _, k := range res.GetKeys() {
					fmt.Fprintln(env.stdout, k)
				}
				return nil
			}
			if sf.given(cmd, env) == "" && (len(env.gatewayFlag) > 0 || env.getenv(envGateway) != "" || !sf.exists()) {
				if len(env.gatewayFlag) == 0 && env.getenv(envGateway) == "" {
					return usagef("no gateway store in %s to read the keys from (nothing was created): give --gateway URL to ask a running gateway, or --data-dir DIR / --database-url URL of the gateway's store", sf.dataDir)
				}
				return unary(env, func(api *apiClients) (*portcullisv1.ListSigningKeysResponse, error) {
					return api.proxy.ListSigningKeys(cmd.Context(), &portcullisv1.ListSigningKeysRequest{})
				}, show)
			}
			return sf.withExisting(cmd, env, func(ctx context.Context, st *store.Store) error {
				keys, err := st.SigningKeys(ctx)
				if err != nil {
					return err
				}
				if len(keys) == 0 {
					return errors.New("the store has no signing key yet: the gateway makes one when it first starts")
				}
				res := &portcullisv1.ListSigningKeysResponse{}
				for _, k := range keys {
					res.Keys = append(res.Keys, signing.FormatPublicKey(k.PublicKey))
				}
				return show(res)
			})
		},
	}
	sf.add(list)

	var rf storeFlags
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Add a new signing key, endorsed by the current one",
		Long: `Add a signing key to the chain, endorsed by the current key, and make
it the one that signs. Running gateways pick it up within their version
check interval (5 s); proxies follow the endorsement on the next version
they receive and pin the new key, refusing versions signed by the old one
from then on. Proxies started with --gateway-key set to an old key keep
working: the chain leads from it to the new key. The store must exist.`,
		Example: `  portcullis signing-key rotate --database-url postgres://postgres@127.0.0.1:5432/portcullis`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return rf.withExisting(cmd, env, func(ctx context.Context, st *store.Store) error {
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
		},
	}
	rf.add(rotate)
	cmd.AddCommand(list, rotate)
	return cmd
}

// given names the store flag or variable given ("" for none: the default
// data dir).
func (f *storeFlags) given(cmd *cobra.Command, env *environment) string {
	switch {
	case cmd.Flags().Changed("database-url"):
		return "--database-url"
	case cmd.Flags().Changed("data-dir"):
		return "--data-dir"
	case env.getenv(envDatabaseURL) != "":
		return envDatabaseURL
	}
	return ""
}

// exists reports whether the embedded SQLite store is in the data dir.
func (f *storeFlags) exists() bool {
	return gateway.StoreConfig{DataDir: f.dataDir}.Exists()
}

// withExisting opens a store that must already exist (an SQLite file in
// the data dir, or a Postgres URL), runs fn and closes the store. A
// missing SQLite store is refused, and nothing is created.
func (f *storeFlags) withExisting(cmd *cobra.Command, env *environment, fn func(context.Context, *store.Store) error) error {
	if cfg := f.config(env, nil); !cfg.Exists() {
		return inputErr(fmt.Errorf("no gateway store at %s (nothing was created): give --data-dir or --database-url of the gateway's store", cfg.SQLitePath()))
	}
	return f.with(cmd.Context(), env, func(ctx context.Context, st *store.Store, _ string) error { return fn(ctx, st) })
}
