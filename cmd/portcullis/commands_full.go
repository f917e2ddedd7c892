//go:build !proxyonly

package main

import "github.com/spf13/cobra"

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
	}
}
