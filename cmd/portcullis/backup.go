//go:build !proxyonly

package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/gateway"
)

// newBackupCmd is `portcullis backup`, on the gateway's store directly.
func newBackupCmd(env *environment) *cobra.Command {
	return storeFileCmd(env, "to", &cobra.Command{Use: "backup --to FILE",
		Short: "Write a backup of the gateway's store, consistent while gateways run",
		Long: `Write a backup of the gateway's store (--data-dir or --database-url) to
FILE, the state of one moment while gateways keep writing; restore it with
portcullis restore into the same engine. See docs/operations.md.`,
		Example: `  portcullis backup --data-dir ./portcullis-data --to portcullis.backup`,
	}, func(ctx context.Context, c gateway.StoreConfig, to string) (string, error) {
		meta, err := gateway.Backup(ctx, c, to)
		return gateway.BackedUp(meta, to), err
	})
}

// newRestoreCmd is `portcullis restore`, into an empty store.
func newRestoreCmd(env *environment) *cobra.Command {
	return storeFileCmd(env, "from", &cobra.Command{Use: "restore --from FILE",
		Short: "Restore a backup into an empty store, then say how proxies follow",
		Long: `Restore the backup FILE into an empty store of its engine (--data-dir or
--database-url); a store not empty, or a backup newer than this binary, is
refused with nothing written. See docs/operations.md.`,
		Example: `  portcullis restore --from portcullis.backup --data-dir ./restored-data`,
	}, func(ctx context.Context, c gateway.StoreConfig, from string) (string, error) {
		meta, err := gateway.Restore(ctx, c, from)
		return gateway.Restored(meta), err
	})
}

// storeFileCmd makes cmd run op on the store the store flags name and the
// file --flag names, printing what op answers.
func storeFileCmd(env *environment, flag string, cmd *cobra.Command, op func(context.Context, gateway.StoreConfig, string) (string, error)) *cobra.Command {
	var sf storeFlags
	var file string
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if file == "" {
			return need(cmd, flag)
		}
		out, err := op(cmd.Context(), sf.config(env, nil), file)
		if err != nil {
			return settingAsUsage(err)
		}
		_, err = fmt.Fprint(env.stdout, out)
		return err
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&file, flag, "", "the backup `FILE`")
	return cmd
}
