package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apitext"
	"github.com/portcullis-dev/portcullis/internal/version"
)

// newVersionCmd is `portcullis version`: the build of this binary.
func newVersionCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version and the commit it was built from",
		Long: `Print the module version and the VCS revision, commit time and state
(modified: built from a tree with uncommitted changes) the Go toolchain
stamped into this binary. A proxy reports the same build to its gateway,
which shows it in 'portcullis proxies list'.`,
		Example: `  portcullis version
  portcullis version -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			info := version.Get()
			if env.jsonOutput() {
				return env.printValueJSON(info)
			}
			fmt.Fprintf(env.stdout, "portcullis %s\n", info.Version)
			return apitext.Fields(env.stdout,
				"  revision", dash(info.Revision),
				"  time", dash(info.Time),
				"  modified", strconv.FormatBool(info.Modified),
				"  go", dash(info.Go),
			)
		},
	}
}

// buildVersion is the build a proxy reports to its gateway (proxies list)
// and the CLI's MCP client its implementation version.
func buildVersion() string { return version.Get().String() }
