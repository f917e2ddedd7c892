//go:build !proxyonly

package main

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/boundary"
)

// newRunCmd is `portcullis run` (the full build's: a sidecar has no use for it).
func newRunCmd(env *environment) *cobra.Command {
	var proxy, sandbox string
	var uid, gid, proxyUID uint32
	var printRules bool
	c := &cobra.Command{
		Use:   "run [--proxy ADDR] [--uid UID] -- CMD [ARG...]",
		Short: "Run a command in a network namespace whose only way out is the proxy",
		Long: `Run CMD in a new network namespace whose only way out is the proxy's
transparent listener (proxy --transparent-listen ADDR): TCP goes to ADDR, DNS
to its resolver, nothing else leaves. Exits with CMD's status. Needs root or
CAP_NET_ADMIN. --print-rules prints instead the nftables rules (nft -f) for
a namespace a runtime made with the proxy inside it.`,
		Example: "  sudo portcullis run --uid 1000 -- node agent.js\n  portcullis run --print-rules --proxy-uid 65532 | nft -f -",
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, err := netip.ParseAddrPort(proxy)
			if err != nil {
				return usagef("--proxy: %v", err)
			} else if printRules {
				_, err := fmt.Fprint(env.stdout, boundary.Rules(boundary.SidecarConfig{Proxy: addr, ProxyUID: proxyUID}))
				return err
			} else if len(args) == 0 {
				return usagef("run needs a command: portcullis run -- CMD [ARG...]")
			}
			cfg := boundary.Config{Proxy: addr, Sandbox: sandbox}
			if cmd.Flags().Changed("uid") {
				cfg.UID = &uid
			}
			if cmd.Flags().Changed("gid") {
				cfg.GID = &gid
			}
			child := exec.Command(args[0], args[1:]...)
			child.Stdin, child.Stdout, child.Stderr = env.stdin, env.stdout, env.stderr
			// Run forwards SIGINT and SIGTERM to CMD itself, then cleans up.
			code, err := boundary.Run(context.WithoutCancel(cmd.Context()), cfg, child)
			return cmp.Or(err, error(&childExit{code}))
		},
	}
	f := c.Flags()
	f.SetInterspersed(false) // flags after CMD are CMD's
	f.StringVar(&proxy, "proxy", boundary.DefaultProxy.String(), "the proxy's transparent listener (TCP and DNS)")
	f.StringVar(&sandbox, "sandbox", "", "the sandbox's name, in the host link's alias")
	f.Uint32Var(&uid, "uid", 0, "run CMD as this user (default: as run)")
	f.Uint32Var(&gid, "gid", 0, "run CMD with this group (default: --uid's number)")
	f.BoolVar(&printRules, "print-rules", false, "print the rules for a namespace with the proxy inside instead")
	f.Uint32Var(&proxyUID, "proxy-uid", 65532, "with --print-rules: the proxy's user, which goes out directly")
	return c
}
