//go:build proxyonly

package main

import "github.com/spf13/cobra"

// rootLong and rootExample are the root command's help.
const (
	rootLong = `Portcullis decides what leaves an AI agent's sandbox.

This build (-tags proxyonly, for sidecar images) runs the proxy: it follows
its sandbox's policy from a gateway, or a policy file, and enforces it. The
gateway and the client commands are in the full portcullis binary.

Exit codes: 0 success; 1 the answer is no; 2 invalid input or usage;
4 gateway unavailable.`
	rootExample = `  portcullis proxy --sandbox orders --token-file orders.token --gateway https://gw.internal:7070
  portcullis proxy --policy orders.yaml
  portcullis proxy ca --data-dir ./portcullis-proxy > ca.pem`
)

// commands are the top-level commands of a proxy-only build (go build
// -tags proxyonly): what a sidecar image runs. The gateway, its store and
// the client commands are left out, and with them what only they link
// (OPA, SQLite, Postgres, the console).
func commands(env *environment) []*cobra.Command {
	return []*cobra.Command{
		newProxyCmd(env),
		newVersionCmd(env),
	}
}
