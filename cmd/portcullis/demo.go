//go:build !proxyonly

package main

import (
	"fmt"
	"net"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/demo"
)

// newDemoCmd is `portcullis demo`.
func newDemoCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("demo", "Upstreams for walkthroughs and tests",
		`  portcullis demo mcp-server --listen 127.0.0.1:8081`)
	var (
		listen    string
		stateless bool
	)
	mcpCmd := &cobra.Command{
		Use:   "mcp-server",
		Short: "Serve an MCP server with the article's tools (lookup_order, refund_order)",
		Long: `Serve an MCP Streamable HTTP server at /mcp with two tools: lookup_order
(the call a policy allows) and refund_order (the call it denies). With
--stateless it speaks MCP 2026-07-28 without sessions.`,
		Example: `  portcullis demo mcp-server --listen 127.0.0.1:8081`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usagef("listen on %s: %v", listen, err)
			}
			fmt.Fprintf(env.stdout, "demo MCP server on http://%s/mcp (tools: lookup_order, refund_order)\n", ln.Addr())
			return demo.ServeOrders(cmd.Context(), ln, &mcp.StreamableHTTPOptions{Stateless: stateless})
		},
	}
	mcpCmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8081", "address to serve on")
	mcpCmd.Flags().BoolVar(&stateless, "stateless", false, "serve MCP 2026-07-28 without sessions")
	cmd.AddCommand(mcpCmd, newDemoAgentCmd(env))
	return cmd
}
