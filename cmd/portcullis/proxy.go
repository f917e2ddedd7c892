package main

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/demo"
)

const (
	defaultProxyListen  = "127.0.0.1:3128"
	defaultProxyDataDir = "./portcullis-proxy"
	decisionLogFile     = "decisions.jsonl"
)

// newProxyCmd is `portcullis proxy` and `portcullis proxy ca`.
func newProxyCmd(env *environment) *cobra.Command {
	var (
		listen      string
		dataDir     string
		policyFile  string
		upstreamCA  string
		devLoopback bool
		reload      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "proxy --policy FILE",
		Short: "Run the enforcing proxy for a sandbox",
		Long: `Run the Portcullis proxy: the sandbox's way out. Agents use it through
HTTP_PROXY/HTTPS_PROXY. Every request is allowed or denied by the policy:
L4 endpoints by destination and calling binary, REST and MCP endpoints per
request (TLS is terminated with the proxy's CA — see 'portcullis proxy ca' —
and re-encrypted to the upstream).

--policy FILE is watched: a changed, valid file swaps in atomically; an
invalid one is refused and the last good version stays. With no valid
policy every request is denied. Decisions are written as JSON lines to
DATA-DIR/decisions.jsonl.`,
		Example: `  portcullis proxy --policy orders.yaml
  HTTPS_PROXY=http://127.0.0.1:3128 SSL_CERT_FILE=ca.pem python3 agent.py`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			if policyFile == "" {
				return usagef("portcullis proxy needs --policy FILE (gateway mode arrives with policy push)")
			}
			log, err := newLogger(env)
			if err != nil {
				return err
			}
			ca, err := dataplane.LoadOrCreateCA(dataDir)
			if err != nil {
				return err
			}
			var roots *x509.CertPool
			if upstreamCA != "" {
				pem, err := os.ReadFile(upstreamCA)
				if err != nil {
					return inputErr(err)
				}
				roots = x509.NewCertPool()
				if !roots.AppendCertsFromPEM(pem) {
					return usagef("--upstream-ca %s holds no PEM certificate", upstreamCA)
				}
			}
			if devLoopback {
				log.Warn("--dev-allow-loopback: policies may reach loopback upstreams; never use this in production")
			}
			out, err := os.OpenFile(filepath.Join(dataDir, decisionLogFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("open decision log: %w", err)
			}
			defer out.Close()
			proxy := dataplane.New(dataplane.Config{
				DevAllowLoopback: devLoopback,
				UpstreamRoots:    roots,
				DecisionLog:      out,
				Logger:           log,
			}, ca)
			if err := proxy.LoadFile(policyFile); err != nil {
				// Start anyway, denying everything, so a fixed file is picked up.
				log.Error("no valid policy yet; denying every request", "err", err)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usagef("listen on %s: %v", listen, err)
			}
			ctx := cmd.Context()
			go proxy.WatchFile(ctx, policyFile, reload)
			fmt.Fprintf(env.stdout, "Portcullis proxy listening on %s\n", ln.Addr())
			fmt.Fprintf(env.stdout, "  policy:    %s (%s)\n", policyFile, versionOrNone(proxy.PolicyVersion()))
			fmt.Fprintf(env.stdout, "  CA:        %s (portcullis proxy ca --data-dir %s)\n", filepath.Join(dataDir, "ca.pem"), dataDir)
			fmt.Fprintf(env.stdout, "  decisions: %s\n", filepath.Join(dataDir, decisionLogFile))
			return proxy.Serve(ctx, ln)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", defaultProxyListen, "proxy address for the sandbox's HTTP_PROXY/HTTPS_PROXY")
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultProxyDataDir, "directory of the proxy's CA and decision log")
	cmd.Flags().StringVar(&policyFile, "policy", "", "policy `FILE` (YAML or JSON), watched for changes")
	cmd.Flags().StringVar(&upstreamCA, "upstream-ca", "", "verify upstream TLS against this PEM `FILE` instead of the system roots (tests)")
	cmd.Flags().BoolVar(&devLoopback, "dev-allow-loopback", false, "let policies reach loopback upstreams (tests and demos only)")
	cmd.Flags().DurationVar(&reload, "reload-interval", time.Second, "how often the policy file is checked for changes")
	cmd.AddCommand(newProxyCACmd(env))
	return cmd
}

func versionOrNone(v string) string {
	if v == "" {
		return "no valid policy: denying everything"
	}
	return v
}

// newProxyCACmd is `portcullis proxy ca`.
func newProxyCACmd(env *environment) *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Print the proxy's CA certificate (PEM), which the sandbox must trust",
		Long: `Print the CA certificate the proxy uses to terminate TLS for inspected
endpoints, creating the CA in --data-dir if it does not exist yet.`,
		Example: `  portcullis proxy ca > ca.pem
  SSL_CERT_FILE=ca.pem HTTPS_PROXY=http://127.0.0.1:3128 curl https://api.example.com/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			ca, err := dataplane.LoadOrCreateCA(dataDir)
			if err != nil {
				return err
			}
			_, err = env.stdout.Write(ca.CertPEM())
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultProxyDataDir, "directory of the proxy's CA")
	return cmd
}

// newDemoCmd is `portcullis demo`.
func newDemoCmd(env *environment) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "demo",
		Short:   "Upstreams for walkthroughs and tests",
		Example: `  portcullis demo mcp-server --listen 127.0.0.1:8081`,
	}
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
			mux := http.NewServeMux()
			mux.Handle("/mcp", demo.OrdersHandler(&mcp.StreamableHTTPOptions{Stateless: stateless}))
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(env.stdout, "demo MCP server on http://%s/mcp (tools: lookup_order, refund_order)\n", ln.Addr())
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case <-cmd.Context().Done():
				return srv.Close()
			case err := <-errc:
				return err
			}
		},
	}
	mcpCmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8081", "address to serve on")
	mcpCmd.Flags().BoolVar(&stateless, "stateless", false, "serve MCP 2026-07-28 without sessions")
	cmd.AddCommand(mcpCmd)
	return cmd
}
