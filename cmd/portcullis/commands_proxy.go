//go:build proxyonly

package main

import "github.com/spf13/cobra"

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
