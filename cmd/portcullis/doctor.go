//go:build !proxyonly

package main

import (
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/doctor"
)

// newDoctorCmd is `portcullis doctor`: internal/doctor's checks of the
// gateway the CLI is pointed at, with its token.
func newDoctorCmd(env *environment) *cobra.Command {
	var sandbox string
	cmd := &cobra.Command{
		Use:   "doctor [--sandbox NAME]",
		Short: "Check the gateway, token, store, clocks, signing keys and a sandbox's proxies",
		Long: `Check a deployment through the gateway's API: the gateway answers, its
store answers (readyz), its clock is within 30s of this host's, the token
is accepted (and its role), the signing key chain verifies, the gateway's
build is within one minor version of this CLI's; with --sandbox, each of
the sandbox's proxies the fleet knows is connected, of a build within one
minor version of the gateway's, and enforces the current version. One line
per check, ok or FAIL with the command that fixes it; exit 0 only when
every check passes.`,
		Example: `  portcullis doctor --gateway https://gateway.example:7070 --token-file admin.token --sandbox orders`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := env.client()
			if err != nil {
				return err
			}
			_, err = doctor.Run(cmd.Context(), doctor.Config{API: api, Gateway: env.gateway.Redacted(), Build: buildVersion(), Sandbox: sandbox}, env.stdout)
			return err
		},
	}
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "also check the proxies of sandbox `NAME`")
	return cmd
}
