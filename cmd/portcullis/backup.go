//go:build !proxyonly

package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/gateway"
)

// storeFileCmd is `portcullis NAME --FLAG FILE`: op on the store the store
// flags name and FILE, printing what op answers. `portcullis backup` and
// `portcullis restore` are made so (docs/operations.md, "Backup and restore").
func storeFileCmd(env *environment, name, flag, short string, op func(context.Context, gateway.StoreConfig, string) (string, error)) *cobra.Command {
	var sf storeFlags
	var file string
	cmd := &cobra.Command{Use: name + " --" + flag + " FILE", Short: short, Args: cobra.NoArgs,
		Long:    short + `; the store is the one --data-dir or --database-url names. See docs/operations.md, "Backup and restore".`,
		Example: "  portcullis " + name + " --" + flag + " portcullis.backup --data-dir ./portcullis-data",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return need(cmd, flag)
			}
			out, err := op(cmd.Context(), sf.config(env, nil), file)
			if err != nil {
				return settingAsUsage(err)
			}
			_, err = fmt.Fprint(env.stdout, out)
			return err
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&file, flag, "", "the backup `FILE`")
	return cmd
}
