//go:build !proxyonly

package main

import "github.com/spf13/cobra"

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
		newProveCmd(env),
		newHealthcheckCmd(env),
		newProxyCmd(env),
		newDemoCmd(env),
		newSandboxCmd(env),
		newTokenCmd(env),
		newPolicyCmd(env),
		newProxiesCmd(env),
		newLogsCmd(env),
		newProposeCmd(env),
		newProposalsCmd(env),
		newApprovalPolicyCmd(env),
		newAuditCmd(env),
		newSentryCmd(env),
		newMCPCmd(env),
		newVersionCmd(env),
		newRunCmd(env),
	}
}
