package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func newSandboxCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("sandbox", "Create, list, inspect and delete sandboxes",
		`  portcullis sandbox create orders -f policy.yaml
  portcullis sandbox list
  portcullis sandbox rotate-token orders -o json
  portcullis sandbox ca orders > orders-ca.pem`)
	cmd.AddCommand(
		newSandboxCreateCmd(env),
		newSandboxListCmd(env),
		newSandboxGetCmd(env),
		newSandboxDeleteCmd(env),
		newSandboxRotateTokenCmd(env),
		newSandboxCACmd(env),
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
			api, err := env.client()
			if err != nil {
				return err
			}
			res, err := api.sandbox.CreateSandbox(cmd.Context(), req)
			if err != nil {
				return err
			}
			env.printWarnings(res.GetWarnings())
			if env.jsonOutput() {
				return env.printJSON(res)
			}
			fmt.Fprintf(env.stdout, "sandbox %s created\n", res.GetName())
			if pv := res.GetPolicyVersion(); pv != nil {
				fmt.Fprintf(env.stdout, "policy: version %d (%s)\n", pv.GetVersion(), hashLabel(pv.GetHash()))
			}
			fmt.Fprintf(env.stdout, "token:  %s\n", res.GetToken())
			fmt.Fprintln(env.stderr, "The token is shown once: give it to the sandbox's proxy, never to the agent.")
			return nil
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
			api, err := env.client()
			if err != nil {
				return err
			}
			res, err := api.sandbox.ListSandboxes(cmd.Context(), &portcullisv1.ListSandboxesRequest{})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(res)
			}
			tw := env.table("NAME", "VERSION", "HASH", "CREATED", "BY")
			for _, s := range res.GetSandboxes() {
				row(tw, s.GetName(), versionCell(s.GetCurrentVersion()), dash(shortHash(s.GetCurrentHash())),
					when(s.GetCreatedAt()), dash(s.GetCreatedBy()))
			}
			return tw.Flush()
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
			api, err := env.client()
			if err != nil {
				return err
			}
			s, err := api.sandbox.GetSandbox(cmd.Context(), &portcullisv1.GetSandboxRequest{Name: a[0]})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(s)
			}
			return env.fields(
				"name", s.GetName(),
				"version", versionCell(s.GetCurrentVersion()),
				"hash", dash(s.GetCurrentHash()),
				"created", when(s.GetCreatedAt()),
				"by", dash(s.GetCreatedBy()),
			)
		},
	}
}

func newSandboxDeleteCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a sandbox, its policy versions and its tokens",
		Example: `  portcullis sandbox delete orders`,
		Args:    args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			api, err := env.client()
			if err != nil {
				return err
			}
			res, err := api.sandbox.DeleteSandbox(cmd.Context(), &portcullisv1.DeleteSandboxRequest{Name: a[0]})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(res)
			}
			fmt.Fprintf(env.stdout, "sandbox %s deleted\n", a[0])
			return nil
		},
	}
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
			api, err := env.client()
			if err != nil {
				return err
			}
			res, err := api.sandbox.RotateSandboxToken(cmd.Context(), &portcullisv1.RotateSandboxTokenRequest{Name: a[0]})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(res)
			}
			fmt.Fprintf(env.stdout, "sandbox %s: old tokens revoked\n", res.GetName())
			fmt.Fprintf(env.stdout, "token:  %s\n", res.GetToken())
			return nil
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
			api, err := env.client()
			if err != nil {
				return err
			}
			res, err := api.sandbox.GetSandboxCA(cmd.Context(), &portcullisv1.GetSandboxCARequest{Name: a[0]})
			if err != nil {
				return err
			}
			if len(res.GetCertPem()) == 0 {
				return fmt.Errorf("the gateway sent no certificate for sandbox %s", a[0])
			}
			if env.jsonOutput() {
				return env.printJSON(res)
			}
			pem := res.GetCertPem()
			if !strings.HasSuffix(pem, "\n") {
				pem += "\n"
			}
			_, err = io.WriteString(env.stdout, pem)
			return err
		},
	}
}

// versionCell is a version number, "-" for a sandbox without a policy.
func versionCell(v uint32) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprint(v)
}
