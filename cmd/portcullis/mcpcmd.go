//go:build !proxyonly

package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/portcullis-dev/portcullis/dataplane/mcp/listing"
	"github.com/spf13/cobra"
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
		proxy, caFile, version string
		headers                []string
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
			tr, header, err := fingerprintTransport(proxy, caFile, headers)
			if err != nil {
				return err
			}
			env.started = true
			tools, err := listing.Fingerprints(cmd.Context(), listing.Config{
				Endpoint: args[0], ProtocolVersion: version, ClientVersion: buildVersion(), Transport: tr, Header: header,
			})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printValueJSON(map[string]any{"tools": tools})
			}
			tw := env.table("FINGERPRINT", "TOOL")
			for _, t := range tools {
				fmt.Fprintf(tw, "%s\t%s\n", t.Fingerprint, t.Name)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&proxy, "proxy", "", "reach the server through this HTTP proxy (a Portcullis proxy: http://HOST:PORT)")
	cmd.Flags().StringVar(&caFile, "ca-file", "", "PEM CA certificates to trust besides the system's (a proxy's CA: portcullis proxy ca)")
	cmd.Flags().StringVar(&version, "protocol-version", "2025-11-25", "MCP protocol version to speak")
	cmd.Flags().StringArrayVar(&headers, "header", nil, "an HTTP header for every request, 'Name: value' (repeatable), such as Authorization")
	return cmd
}

// fingerprintTransport is what `mcp fingerprint`'s flags ask of the
// requests: the proxy, the CAs and the headers.
func fingerprintTransport(proxy, caFile string, headers []string) (*http.Transport, http.Header, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if proxy != "" {
		u, err := url.Parse(proxy)
		if err != nil || u.Host == "" {
			return nil, nil, usagef("--proxy %q is not a URL such as http://127.0.0.1:3128", proxy)
		}
		tr.Proxy = http.ProxyURL(u)
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, nil, usagef("--ca-file: %v", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, nil, usagef("--ca-file %s holds no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	h := http.Header{}
	for _, kv := range headers {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, nil, usagef("--header %q: want 'Name: value'", kv)
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return tr, h, nil
}
