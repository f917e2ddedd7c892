package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func newSandboxCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("sandbox", "Create, list, inspect and delete sandboxes",
		`  portcullis sandbox create orders -f policy.yaml
  portcullis sandbox list
  portcullis sandbox rotate-token orders -o json
  portcullis sandbox ca orders > orders-ca.pem
  portcullis sandbox set-boundary orders -f boundary.yaml
  portcullis sandbox credentials orders --add api.github.com:443
  portcullis sandbox freeze orders --reason "exfiltration suspected"
  portcullis sandbox unfreeze orders --reason "incident 42 closed"
  portcullis sandbox tools orders`)
	cmd.AddCommand(
		newSandboxCreateCmd(env),
		newSandboxListCmd(env),
		newSandboxGetCmd(env),
		newSandboxDeleteCmd(env),
		newSandboxRotateTokenCmd(env),
		newSandboxCACmd(env),
		newSandboxSetBoundaryCmd(env),
		newSandboxCredentialsCmd(env),
		newSandboxFreezeCmd(env),
		newSandboxUnfreezeCmd(env),
		newSandboxToolsCmd(env),
	)
	return cmd
}

func newSandboxCreateCmd(env *environment) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "create NAME [-f POLICY]",
		Short: "Create a sandbox and print its token (for its proxy, never the agent)",
		Long: `Create a sandbox, optionally with its first policy version, and print the
sandbox's token. The token is shown once: give it to the sandbox's proxy,
never to the agent. The first policy version fixes filesystem_policy,
landlock and process for the life of the sandbox.`,
		Example: `  portcullis sandbox create orders -f policy.yaml
  portcullis sandbox create orders -o json | jq -r .token > orders.token`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			req := &portcullisv1.CreateSandboxRequest{Name: a[0]}
			if file != "" {
				doc, err := env.readInput(file)
				if err != nil {
					return err
				}
				req.Policy = string(doc)
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.CreateSandboxResponse, error) {
				res, err := api.Sandbox.CreateSandbox(cmd.Context(), req)
				env.printWarnings(res.GetWarnings())
				return res, err
			}, func(res *portcullisv1.CreateSandboxResponse) error {
				fmt.Fprintf(env.stdout, "sandbox %s created\n", res.GetName())
				if pv := res.GetPolicyVersion(); pv != nil {
					fmt.Fprintf(env.stdout, "policy: version %d (%s)\n", pv.GetVersion(), hashLabel(pv.GetHash()))
				}
				fmt.Fprintf(env.stdout, "token:  %s\n", res.GetToken())
				fmt.Fprintln(env.stderr, "The token is shown once: give it to the sandbox's proxy, never to the agent.")
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "first policy `FILE` (YAML or JSON; - reads stdin)")
	return cmd
}

func newSandboxListCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List sandboxes with their current policy version",
		Example: `  portcullis sandbox list
  portcullis sandbox list -o json | jq -r '.sandboxes[].name'`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.ListSandboxesResponse, error) {
				return api.Sandbox.ListSandboxes(cmd.Context(), &portcullisv1.ListSandboxesRequest{})
			}, (*portcullisv1.ListSandboxesResponse).GetSandboxes, apitext.Sandboxes)
		},
	}
}

func newSandboxGetCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   "Show one sandbox",
		Example: `  portcullis sandbox get orders`,
		Args:    args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return unary(env, func(api *apiclient.Client) (*portcullisv1.Sandbox, error) {
				return api.Sandbox.GetSandbox(cmd.Context(), &portcullisv1.GetSandboxRequest{Name: a[0]})
			}, func(s *portcullisv1.Sandbox) error { return apitext.Sandbox(env.stdout, s) })
		},
	}
}

func newSandboxDeleteCmd(env *environment) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME [--yes]",
		Short: "Delete a sandbox, its policy versions and its tokens",
		Long: `Delete a sandbox with its policy versions, proposals and tokens; its
proxies deny everything from then on. It cannot be undone. On a terminal
the command asks you to type the sandbox's name; elsewhere (a script, a
pipe) it needs --yes.`,
		Example: `  portcullis sandbox delete orders
  portcullis sandbox delete orders --yes`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			name := a[0]
			if !yes && !env.interactive {
				return usagef("%s deletes sandbox %s for good: give --yes (stdin is not a terminal to ask on)", cmd.CommandPath(), name)
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.DeleteSandboxResponse, error) {
				if !yes { // asked only of a sandbox that is there
					if _, err := api.Sandbox.GetSandbox(cmd.Context(), &portcullisv1.GetSandboxRequest{Name: name}); err != nil {
						return nil, err
					}
					if !env.confirm(fmt.Sprintf("Delete sandbox %s, its policy versions, proposals and tokens? This cannot be undone.\nType the sandbox's name to confirm: ", name), name) {
						return nil, fmt.Errorf("not deleted: the answer was not %q", name)
					}
				}
				return api.Sandbox.DeleteSandbox(cmd.Context(), &portcullisv1.DeleteSandboxRequest{Name: name})
			}, func(res *portcullisv1.DeleteSandboxResponse) error {
				fmt.Fprintf(env.stdout, "sandbox %s deleted\n", name)
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "delete without asking")
	return cmd
}

func newSandboxRotateTokenCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-token NAME",
		Short: "Revoke a sandbox's tokens and print a new one",
		Long: `Revoke every token of the sandbox and print a new one, shown once. Proxies
holding the old token lose their subscription until they get the new one.`,
		Example: `  portcullis sandbox rotate-token orders
  portcullis sandbox rotate-token orders -o json | jq -r .token > orders.token`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return unary(env, func(api *apiclient.Client) (*portcullisv1.RotateSandboxTokenResponse, error) {
				return api.Sandbox.RotateSandboxToken(cmd.Context(), &portcullisv1.RotateSandboxTokenRequest{Name: a[0]})
			}, func(res *portcullisv1.RotateSandboxTokenResponse) error {
				fmt.Fprintf(env.stdout, "sandbox %s: old tokens revoked\n", res.GetName())
				fmt.Fprintf(env.stdout, "token:  %s\n", res.GetToken())
				return nil
			})
		},
	}
}

func newSandboxCACmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "ca NAME",
		Short: "Print the sandbox's CA certificate (PEM), which the sandbox must trust",
		Long: `Print the certificate (PEM) of the sandbox's CA. Each sandbox has one CA,
kept by the gateway (created on first use) and shared by all of the
sandbox's proxies, which terminate TLS for inspected endpoints with
certificates it signs. Install it in the sandbox's trust store, or point
the agent's TLS library at it. Its key never leaves the gateway except to
the sandbox's proxies.

With -o json: {"cert_pem": "-----BEGIN CERTIFICATE-----…"}.`,
		Example: `  portcullis sandbox ca orders > orders-ca.pem
  SSL_CERT_FILE=orders-ca.pem HTTPS_PROXY=http://127.0.0.1:3128 python3 agent.py
  portcullis sandbox ca orders -o json | jq -r .cert_pem`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return unary(env, func(api *apiclient.Client) (*portcullisv1.GetSandboxCAResponse, error) {
				res, err := api.Sandbox.GetSandboxCA(cmd.Context(), &portcullisv1.GetSandboxCARequest{Name: a[0]})
				if err == nil && len(res.GetCertPem()) == 0 {
					return nil, fmt.Errorf("the gateway sent no certificate for sandbox %s", a[0])
				}
				return res, err
			}, func(res *portcullisv1.GetSandboxCAResponse) error {
				pem := res.GetCertPem()
				if !strings.HasSuffix(pem, "\n") {
					pem += "\n"
				}
				_, err := io.WriteString(env.stdout, pem)
				return err
			})
		},
	}
}

func newSandboxSetBoundaryCmd(env *environment) *cobra.Command {
	var (
		file          string
		clearBoundary bool
	)
	cmd := &cobra.Command{
		Use:   "set-boundary NAME (-f FILE | --clear)",
		Short: "Set the most a sandbox may ever be granted, or remove it",
		Long: `Store a policy document (YAML or JSON) as the sandbox's boundary: the most
it may ever be granted. Its policy is not changed; proposals that would
reach beyond the boundary are flagged exceeds_boundary for the approvers.
--clear removes the boundary. Prints the sandbox's name and the boundary's
hash; with -o json the Sandbox.`,
		Example: `  portcullis sandbox set-boundary orders -f boundary.yaml
  portcullis sandbox set-boundary orders -f - < boundary.json
  portcullis sandbox set-boundary orders --clear`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			switch {
			case file != "" && clearBoundary:
				return usagef("give -f FILE or --clear, not both")
			case file == "" && !clearBoundary:
				return usagef("%s needs -f FILE or --clear", cmd.CommandPath())
			}
			req := &portcullisv1.SetSandboxBoundaryRequest{Name: a[0]}
			if file != "" {
				doc, err := env.readInput(file)
				if err != nil {
					return err
				}
				if strings.TrimSpace(string(doc)) == "" {
					// An empty document would remove the boundary: say
					// --clear for that, never by accident.
					return inputErr(fmt.Errorf("%s is empty; use --clear to remove the boundary", displayName(file)))
				}
				req.Document = string(doc)
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.Sandbox, error) {
				return api.Sandbox.SetSandboxBoundary(cmd.Context(), req)
			}, func(s *portcullisv1.Sandbox) error {
				return apitext.Fields(env.stdout, "name", s.GetName(), "boundary", apitext.BoundaryCell(s))
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "boundary policy `FILE` (YAML or JSON; - reads stdin)")
	cmd.Flags().BoolVar(&clearBoundary, "clear", false, "remove the boundary")
	return cmd
}

func newSandboxCredentialsCmd(env *environment) *cobra.Command {
	var add, remove []string
	cmd := &cobra.Command{
		Use:   "credentials NAME (--add HOST:PORT | --remove HOST:PORT)...",
		Short: "Add or remove the destinations that carry credentials for a sandbox",
		Long: `Add or remove HOST:PORT destinations whose requests carry credentials
injected for this sandbox. Proposals that add reach to one of them are
flagged new_credentialed_reach for the approvers (and
l7_bypass_credentialed when the binary is git, ssh or nc). Hosts are stored in
lower case; removing one that is not there is not an error. --add and
--remove repeat, and at least one is needed. Prints the resulting list;
with -o json the Sandbox.`,
		Example: `  portcullis sandbox credentials orders --add api.github.com:443
  portcullis sandbox credentials orders --add api.stripe.com:443 --remove api.github.com:443`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if len(add)+len(remove) == 0 {
				return usagef("%s needs --add HOST:PORT or --remove HOST:PORT", cmd.CommandPath())
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.Sandbox, error) {
				return api.Sandbox.SetCredentialedHosts(cmd.Context(), &portcullisv1.SetCredentialedHostsRequest{
					Name: a[0], Add: add, Remove: remove,
				})
			}, func(s *portcullisv1.Sandbox) error {
				hosts := s.GetCredentialedHosts()
				if len(hosts) == 0 {
					fmt.Fprintf(env.stdout, "sandbox %s has no credentialed hosts\n", s.GetName())
					return nil
				}
				fmt.Fprintf(env.stdout, "credentialed hosts of sandbox %s:\n", s.GetName())
				for _, h := range hosts {
					fmt.Fprintf(env.stdout, "  %s\n", h)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringArrayVar(&add, "add", nil, "a destination that carries credentials (`HOST:PORT`, repeatable)")
	cmd.Flags().StringArrayVar(&remove, "remove", nil, "a destination that no longer carries credentials (`HOST:PORT`, repeatable)")
	return cmd
}

func newSandboxFreezeCmd(env *environment) *cobra.Command {
	return newKillSwitchCmd(env, reasonCmd[string, *portcullisv1.Sandbox]{
		use:   "freeze NAME --reason R",
		short: "Kill switch: push a deny-all version and refuse proposals",
		long: `Freeze a sandbox (operator or admin): the gateway commits a deny-all
version (the fixed filesystem_policy, landlock and process kept, every
network entry gone), pushes it to the sandbox's proxies, and refuses new
proposals and approvals until an admin unfreezes it. --reason is
required and recorded. Prints the deny-all version; with -o json the
Sandbox. Freezing a frozen sandbox is a conflict (exit 3).

` + waitHelp,
		example: `  portcullis sandbox freeze orders --reason "exfiltration suspected, incident 42"
  portcullis sandbox freeze orders --reason "incident 42" --wait --wait-timeout 5s`,
		reasonHelp: "why (`TEXT`, required; recorded and shown by sandbox get)",
		call: func(ctx context.Context, api *apiclient.Client, name, reason string) (*portcullisv1.Sandbox, error) {
			return api.Sandbox.FreezeSandbox(ctx, &portcullisv1.FreezeSandboxRequest{Name: name, Reason: reason})
		},
	}, "sandbox %s frozen: deny-all is version %s")
}

func newSandboxUnfreezeCmd(env *environment) *cobra.Command {
	return newKillSwitchCmd(env, reasonCmd[string, *portcullisv1.Sandbox]{
		use:   "unfreeze NAME --reason R",
		short: "Lift the kill switch: restore the policy from before the freeze",
		long: `Unfreeze a sandbox (admin): the policy that was current before the freeze
is committed again as a new version and pushed, and proposals are taken
again. --reason is required and recorded. Prints the new version; with
-o json the Sandbox. Unfreezing a sandbox that is not frozen is a
conflict (exit 3).

` + waitHelp,
		example:    `  portcullis sandbox unfreeze orders --reason "incident 42 closed"`,
		reasonHelp: "why (`TEXT`, required; recorded)",
		call: func(ctx context.Context, api *apiclient.Client, name, reason string) (*portcullisv1.Sandbox, error) {
			return api.Sandbox.UnfreezeSandbox(ctx, &portcullisv1.UnfreezeSandboxRequest{Name: name, Reason: reason})
		},
	}, "sandbox %s unfrozen: the policy from before the freeze is version %s")
}

// newKillSwitchCmd completes sandbox freeze or unfreeze: NAME, a
// required --reason, and done printed with the sandbox's name and its new
// version.
func newKillSwitchCmd(env *environment, c reasonCmd[string, *portcullisv1.Sandbox], done string) *cobra.Command {
	c.arg, c.needReason = "NAME", true
	c.committed = func(s *portcullisv1.Sandbox) (string, uint32) { return s.GetName(), s.GetCurrentVersion() }
	// The gateway checks the name.
	c.parse = func(name string) (string, error) { return name, nil }
	c.done = func(s *portcullisv1.Sandbox) string {
		return fmt.Sprintf(done, s.GetName(), versionCell(s.GetCurrentVersion()))
	}
	return newReasonCmd(env, c)
}
