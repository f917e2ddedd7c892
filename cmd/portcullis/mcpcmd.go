//go:build !proxyonly

package main

import (
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/dataplane/mcp/listing"
	"github.com/portcullis-dev/portcullis/internal/apitext"
)

// newMCPCmd is `portcullis mcp`: tools for operators of MCP endpoints.
func newMCPCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("mcp", "Look at MCP servers as the proxy sees them",
		`  portcullis mcp fingerprint http://127.0.0.1:8081/mcp`)
	cmd.AddCommand(newMCPFingerprintCmd(env))
	return cmd
}

func newMCPFingerprintCmd(env *environment) *cobra.Command {
	var (
		reach   listing.Reach
		version string
	)
	cmd := &cobra.Command{
		Use:   "fingerprint URL",
		Short: "Print the definition fingerprint of each tool an MCP server lists",
		Long: `Connect to the MCP server at URL (Streamable HTTP), list its tools (every
page) and print each tool's definition fingerprint: the SHA-256 of the tool
object exactly as the server lists it, canonicalised with RFC 8785 (JCS) —
what a tools/call rule's definition pins:

  - allow:
      method: tools/call
      tool: lookup_order
      definition: "sha256:…"

With --proxy the server is reached through a Portcullis proxy, as the agent
reaches it (the list is then the one the proxy lets through, and a proxy
that terminates TLS needs its CA: --ca-file).`,
		Example: `  portcullis mcp fingerprint http://127.0.0.1:8081/mcp
  portcullis mcp fingerprint https://orders.example.com/mcp --proxy http://127.0.0.1:3128 --ca-file ca.pem -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lc := listing.Config{Endpoint: args[0], ProtocolVersion: version, ClientVersion: buildVersion()}
			if err := reach.Apply(&lc); err != nil {
				return asUsage(err)
			}
			env.started = true
			tools, err := listing.Fingerprints(cmd.Context(), lc)
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printValueJSON(map[string]any{"tools": tools})
			}
			return apitext.Table(env.stdout, func(add func(...string)) {
				for _, t := range tools {
					add(t.Fingerprint, t.Name)
				}
			}, "FINGERPRINT", "TOOL")
		},
	}
	cmd.Flags().StringVar(&reach.Proxy, "proxy", "", "reach the server through this HTTP proxy (a Portcullis proxy: http://HOST:PORT)")
	cmd.Flags().StringVar(&reach.CAFile, "ca-file", "", "PEM CA certificates to trust besides the system's (a proxy's CA: portcullis proxy ca)")
	cmd.Flags().StringVar(&version, "protocol-version", "2025-11-25", "MCP protocol version to speak")
	cmd.Flags().StringArrayVar(&reach.Headers, "header", nil, "an HTTP header for every request, 'Name: value' (repeatable), such as Authorization")
	return cmd
}
