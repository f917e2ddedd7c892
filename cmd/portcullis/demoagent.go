//go:build !proxyonly

package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/demo"
)

// newDemoAgentCmd is `portcullis demo agent`: the README's agent as a
// program, for docker compose and tests.
func newDemoAgentCmd(env *environment) *cobra.Command {
	var (
		cfg  demo.AgentConfig
		wait time.Duration
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Play a sandboxed agent: call a tool through the proxy, propose when denied, call again once approved",
		Long: `Play the agent of the README's loop. It calls a tool of an MCP server
through its proxy (MCP 2026-07-28, no session). When the proxy denies the
call, it proposes the narrowest change through http://policy.local — it
holds no token — waits until an operator decides, and calls again. It
exits 0 once the call succeeds (at once if it is already allowed), 1 if
the proposal is refused, rejected or withdrawn, 4 when --wait-timeout passes
(default: it waits until stopped).`,
		Example: `  portcullis demo agent --proxy http://127.0.0.1:3128 --server http://127.0.0.1:8081/mcp
  portcullis demo agent --proxy http://proxy:3128 --server http://demo-mcp:8081/mcp --wait-timeout 1h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			cfg.Out = env.stdout
			ctx := cmd.Context()
			if wait > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, wait)
				defer cancel()
			}
			return demo.Agent(ctx, cfg)
		},
	}
	cmd.Flags().StringVar(&cfg.Proxy, "proxy", "http://"+defaultProxyListen, "the sandbox's proxy (`URL`)")
	cmd.Flags().StringVar(&cfg.Server, "server", "http://127.0.0.1:8081/mcp", "the MCP endpoint to call (`URL`)")
	cmd.Flags().StringVar(&cfg.Tool, "tool", "lookup_order", "the tool to call")
	cmd.Flags().StringVar(&cfg.Arguments, "arguments", `{"order_id":"A-10420"}`, "the call's arguments (a JSON object)")
	cmd.Flags().StringVar(&cfg.Rationale, "rationale", "", "why the agent needs the call (the proposal's rationale)")
	cmd.Flags().DurationVar(&wait, "wait-timeout", 0, "give up after `DURATION` (0: wait until stopped)")
	return cmd
}
