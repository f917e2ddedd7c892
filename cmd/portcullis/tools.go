package main

import (
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func newSandboxToolsCmd(env *environment) *cobra.Command {
	var tool string
	cmd := &cobra.Command{
		Use:   "tools NAME",
		Short: "List the MCP tool definitions the sandbox's proxies saw, current and past",
		Long: `List the MCP tools the sandbox's proxies saw servers list, per endpoint:
each tool's definitions, the current one first, with the fingerprint a
rule's definition pins ("sha256:…") and when a proxy first and last saw
the tool take it. Every change of a tool's definition, pinned or not, is
shipped to the gateway with the proxy's decision records; the gateway
keeps each sandbox's 1,000 definitions seen last.

With -o json: {"tools": [{host, port, path, tool, definitions: [{fingerprint,
definition, first_seen, last_seen, proxy_id}, …]}, …]}; definition is the
tool object as the server listed it (empty when over 64 KiB). One answer
carries at most 2 MiB of definitions, current ones first: the others have
"definition_omitted": true, and --tool NAME brings them.`,
		Example: `  portcullis sandbox tools orders
  portcullis sandbox tools orders --tool lookup_order -o json | jq -r '.tools[0].definitions[0].definition'`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.ListToolsResponse, error) {
				return api.Sandbox.ListTools(cmd.Context(), &portcullisv1.ListToolsRequest{Name: a[0], Tool: tool})
			}, (*portcullisv1.ListToolsResponse).GetTools, apitext.Tools)
		},
	}
	cmd.Flags().StringVar(&tool, "tool", "", "list only the tools of this name (with every definition kept)")
	return cmd
}
