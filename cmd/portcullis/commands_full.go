//go:build !proxyonly

package main

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/boundary"
	"github.com/portcullis-dev/portcullis/gateway"
)

// rootLong and rootExample are the root command's help.
const (
	rootLong = `Portcullis decides what leaves an AI agent's sandbox.

The gateway stores versioned policies per sandbox and pushes them to the
sandbox's proxies. The client commands talk to a gateway's API with an admin
or operator token; propose (and proposals, to follow them) use the
sandbox's own token.

Exit codes: 0 success; 1 the answer is no (not found, permission denied,
unauthenticated, too many proposals); 2 invalid input or usage (a proposal
refused as not narrow too); 3 conflict (stale expected version, already
exists, a proposal no longer pending, an approval of a resulting hash that
is no longer the proposal's); 4 gateway unavailable (unreachable,
overloaded, or the address is not a Portcullis gateway).`
	rootExample = `  portcullis gateway
  export PORTCULLIS_TOKEN=…   # or --token-file FILE
  portcullis sandbox create orders -f policy.yaml
  portcullis policy get orders -o yaml > policy.yaml
  portcullis policy set orders -f policy.yaml --expect-version 1
  portcullis proxies list
  portcullis logs orders --tail --decision deny
  portcullis propose -f proposal.yaml --token-file orders.token
  portcullis proposals approve 12 --reason "narrow; ticket 8812"
  portcullis sentry actions --status held`
)

// commands are the top-level commands of the full binary: the gateway,
// the proxy and every client command.
func commands(env *environment) []*cobra.Command {
	return []*cobra.Command{
		newGatewayCmd(env),
		newMigrateCmd(env),
		newSigningKeyCmd(env),
		storeFileCmd(env, "backup", "to", "Write a backup of the gateway's store, consistent while gateways run", gateway.BackupFile),
		storeFileCmd(env, "restore", "from", "Restore a backup into an empty store (a store not empty is refused)", gateway.RestoreFile),
		newProveCmd(env),
		newHealthcheckCmd(env),
		newDoctorCmd(env),
		newProxyCmd(env),
		newDemoCmd(env),
		withProviders(newSandboxCmd(env), env),
		newTokenCmd(env),
		newProviderCmd(env),
		newPolicyCmd(env),
		newProxiesCmd(env),
		newLogsCmd(env),
		newProposeCmd(env),
		newProposalsCmd(env),
		newCallsCmd(env),
		newApprovalPolicyCmd(env),
		newAuditCmd(env),
		newSentryCmd(env),
		newMCPCmd(env),
		newVersionCmd(env),
		newRunCmd(env),
	}
}

// newRunCmd is `portcullis run` (a sidecar has no use for it).
func newRunCmd(env *environment) *cobra.Command {
	var cfg boundary.Config
	var printRules bool
	var proxyUID uint32
	c := &cobra.Command{
		Use:   "run [--proxy ADDR] [--uid UID] -- CMD [ARG...]",
		Short: "Run a command in a network namespace whose only way out is the proxy",
		Long: `Run CMD in a new network namespace whose only way out is the proxy: every
TCP connection goes to the proxy's --transparent-listen ADDR, which judges it
as it would a CONNECT to where it was sent; DNS (to any server, a loopback
stub included) goes to the proxy's resolver at the same address, which answers
only names the policy could allow and NXDOMAIN for the rest; other UDP, ICMP
and IPv6 are dropped. Loopback inside stays CMD's own. No proxy settings are
needed, and none can be ignored.

CMD runs as --uid/--gid (run a sandboxed agent unprivileged); run exits with
its status (128+N when killed by signal N) and forwards SIGINT, SIGTERM and
SIGHUP to it. The interface and rules run made are removed when CMD ends, on
a signal, and, after a crash, by the next run. Needs root or CAP_NET_ADMIN.

--print-rules prints the nftables rules for a namespace a container runtime
made, with the proxy inside as --proxy-uid (compose, Kubernetes: deploy/).`,
		Example: `  portcullis proxy --policy orders.yaml --transparent-listen 127.0.0.1:3129 &
  sudo portcullis run --uid 1000 -- node agent.js
  portcullis run --print-rules --proxy-uid 65532 | nft -f -`,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if printRules {
				_, err := fmt.Fprint(env.stdout, boundary.Rules(boundary.SidecarConfig{Proxy: cfg.Proxy, ProxyUID: proxyUID}))
				return err
			} else if len(args) == 0 {
				return usagef("run needs a command: portcullis run -- CMD [ARG...]")
			}
			// Run forwards SIGINT and SIGTERM to CMD itself, then cleans up.
			env.exit, err = boundary.Exec(context.WithoutCancel(cmd.Context()), cfg, args, env.stdin, env.stdout, env.stderr)
			return err
		},
	}
	f := c.Flags()
	f.SetInterspersed(false) // flags after CMD are CMD's
	f.Func("proxy", "the proxy's transparent listener `ADDR`, TCP and DNS (default 127.0.0.1:3129)", func(s string) (err error) { cfg.Proxy, err = netip.ParseAddrPort(s); return err })
	f.Func("uid", "run CMD as this user id, `UID` (default: as run)", func(s string) (err error) { cfg.UID, err = boundary.ParseID(s); return err })
	f.Func("gid", "run CMD with this group id, `GID` (default: the UID)", func(s string) (err error) { cfg.GID, err = boundary.ParseID(s); return err })
	f.StringVar(&cfg.Sandbox, "sandbox", "", "the sandbox's name, in the host link's alias")
	f.BoolVar(&printRules, "print-rules", false, "print the rules for a namespace with the proxy inside instead")
	f.Uint32Var(&proxyUID, "proxy-uid", 65532, "with --print-rules: the proxy's user, which goes out directly")
	return c
}
