//go:build !proxyonly

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	"github.com/portcullis-dev/portcullis/internal/cliexit"
	"github.com/portcullis-dev/portcullis/internal/secretinput"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/provider"
)

func newProviderCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("provider", "Credential providers: secrets the gateway keeps and proxies inject",
		`  portcullis provider create github --type bearer --hosts api.github.com --secret-file gh.token
  portcullis sandbox providers attach orders github
  portcullis provider rotate github --secret-file gh.token
  portcullis provider list`)
	cmd.Long = `A provider is a credential the gateway keeps, encrypted, and a sandbox's
proxies inject into (or sign) the requests its policy binds to it, so that
the agent never holds it. An endpoint binds with
credential_binding: {provider: NAME}; the agent sends the placeholder
` + provider.Placeholder("NAME") + ` where the credential goes, or nothing.
Types: ` + strings.Join(provider.Types, ", ") + `. docs/credentials.md says
what each does. Values are never printed, logged or returned by any call.`
	cmd.AddCommand(newProviderCreateCmd(env), newProviderListCmd(env), newProviderShowCmd(env),
		newProviderRotateCmd(env), newProviderDeleteCmd(env))
	return cmd
}

// addSecretFlags adds create's and rotate's --secret-file and
// --secret-env: never a secret's value on the command line.
func addSecretFlags(cmd *cobra.Command, f *secretinput.Flags) {
	cmd.Flags().StringVar(&f.File, "secret-file", "", "read the secret from `FILE` (- reads stdin): the value, or FIELD=VALUE lines for a type with several fields")
	cmd.Flags().StringArrayVar(&f.Env, "secret-env", nil, "read the secret from an environment variable (`VAR`, or FIELD=VAR; repeatable)")
}

func readSecret(env *environment, f secretinput.Flags, typ string) (map[string][]byte, error) {
	secret, err := f.Read(typ, env.readInput, env.getenv)
	if err != nil && !isA[*cliexit.InputError](err) {
		err = usagef("%v", err)
	}
	return secret, err
}

func newProviderCreateCmd(env *environment) *cobra.Command {
	var typ string
	var hosts, settings []string
	var sf secretinput.Flags
	cmd := &cobra.Command{
		Use:   "create NAME --type TYPE --hosts HOST,… [--setting KEY=VALUE]… (--secret-file F | --secret-env VAR…)",
		Short: "Create a credential provider (admin)",
		Long: `Create a provider. --hosts: where its credential may go, over TLS only
([https://]HOST[:PORT], port 443; "*.example.com" as endpoints write it),
or http://HOST[:PORT] (port 80) to opt in plain HTTP.
Settings by type: header takes header (the field to set), basic username, oauth2-client-credentials token_url and optionally scopes, audience,
resource; token-exchange token_url and optionally audience, resource,
scopes, subject_token_type, requested_token_type. Secret fields by type:
bearer token, header value, basic password, aws access_key_id and
secret_access_key (and session_token), oauth2-client-credentials client_id
and client_secret, token-exchange subject_token (and client_id with
client_secret).`,
		Example: `  portcullis provider create github --type bearer --hosts api.github.com --secret-file gh.token
  portcullis provider create stripe --type header --hosts api.stripe.com --setting header=X-Api-Key --secret-env STRIPE_KEY
  portcullis provider create s3 --type aws --hosts '*.s3.amazonaws.com' --secret-env access_key_id=AWS_ACCESS_KEY_ID --secret-env secret_access_key=AWS_SECRET_ACCESS_KEY
  portcullis provider create crm --type oauth2-client-credentials --hosts api.crm.example --setting token_url=https://login.crm.example/token --secret-file crm.env`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if typ == "" {
				return need(cmd, "type")
			}
			if len(hosts) == 0 {
				return need(cmd, "hosts")
			}
			set := map[string]string{}
			for _, s := range settings {
				k, v, ok := strings.Cut(s, "=")
				if !ok {
					return usagef("--setting %s: want KEY=VALUE", s)
				}
				set[k] = v
			}
			secret, err := readSecret(env, sf, typ)
			if err != nil {
				return err
			}
			if err := provider.Check(provider.Spec{Name: a[0], Type: typ, Hosts: hosts, Settings: set}, secret); err != nil {
				return usagef("%v", err)
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.Provider, error) {
				return api.Provider.CreateProvider(cmd.Context(), &portcullisv1.CreateProviderRequest{
					Name: a[0], Type: typ, Hosts: hosts, Settings: set, Secret: secret,
				})
			}, func(p *portcullisv1.Provider) error {
				fmt.Fprintf(env.stdout, "provider %s created (%s, revision %d); attach it with: portcullis sandbox providers attach SANDBOX %s\n",
					p.GetName(), p.GetType(), p.GetRevision(), p.GetName())
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "`TYPE`: "+strings.Join(provider.Types, ", "))
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "destinations the credential may go to (`[http://]HOST[:PORT],…`: TLS unless http://)")
	cmd.Flags().StringArrayVar(&settings, "setting", nil, "a non-secret setting (`KEY=VALUE`; repeatable)")
	addSecretFlags(cmd, &sf)
	return cmd
}

func newProviderListCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List providers (never their secrets)",
		Example: `  portcullis provider list`,
		Args:    args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.ListProvidersResponse, error) {
				return api.Provider.ListProviders(cmd.Context(), &portcullisv1.ListProvidersRequest{})
			}, (*portcullisv1.ListProvidersResponse).GetProviders, apitext.Providers)
		},
	}
}

func newProviderShowCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:     "show NAME",
		Short:   "Show a provider: type, hosts, settings, the names of its secret's fields",
		Example: `  portcullis provider show github`,
		Args:    args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return unary(env, func(api *apiclient.Client) (*portcullisv1.Provider, error) {
				return api.Provider.GetProvider(cmd.Context(), &portcullisv1.GetProviderRequest{Name: a[0]})
			}, func(p *portcullisv1.Provider) error { return apitext.Provider(env.stdout, p) })
		},
	}
}

func newProviderRotateCmd(env *environment) *cobra.Command {
	var sf secretinput.Flags
	var expect uint64
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "rotate NAME (--secret-file F | --secret-env VAR…) [--expect-revision N]",
		Short: "Replace a provider's secret and wait until its proxies hold it",
		Long: `Replace every field of the provider's secret. Its revision goes up by one
and the proxies of every sandbox it is attached to receive the new value;
the command waits (--wait, 0 not at all) until each connected proxy says
it holds it, and exits 1 naming those that did not.`,
		Example: `  portcullis provider rotate github --secret-file gh.token
  portcullis provider rotate s3 --secret-file aws.env --expect-revision 3`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			api, cur, err := callGateway(env, func(api *apiclient.Client) (*portcullisv1.Provider, error) {
				return api.Provider.GetProvider(cmd.Context(), &portcullisv1.GetProviderRequest{Name: a[0]})
			})
			if err != nil {
				return err
			}
			secret, err := readSecret(env, sf, cur.GetType())
			if err != nil {
				return err
			}
			p, err := api.Provider.RotateProvider(cmd.Context(), &portcullisv1.RotateProviderRequest{Name: a[0], Secret: secret, ExpectRevision: expect})
			if err != nil {
				return err
			}
			if err := answer(env, jsonOptions, func(p *portcullisv1.Provider) error {
				fmt.Fprintf(env.stdout, "provider %s rotated to revision %d\n", p.GetName(), p.GetRevision())
				return nil
			})(p, nil); err != nil {
				return err
			}
			return awaitCredentials(cmd, env, api, p.GetSandboxes(), wait)
		},
	}
	addSecretFlags(cmd, &sf)
	cmd.Flags().Uint64Var(&expect, "expect-revision", 0, "refuse (exit 3) unless the provider is at revision `N`")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait for the proxies to hold the new secret (`D`; 0: not at all)")
	return cmd
}

// awaitCredentials waits until the connected proxies of sandboxes hold
// their current credentials, saying on stderr how many do.
func awaitCredentials(cmd *cobra.Command, env *environment, api *apiclient.Client, sandboxes []string, wait time.Duration) error {
	if wait <= 0 || len(sandboxes) == 0 {
		return nil
	}
	n, err := api.AwaitCredentials(cmd.Context(), sandboxes, wait)
	fmt.Fprintf(env.stderr, "%d connected proxies of %s hold it\n", n, strings.Join(sandboxes, ", "))
	return err
}

func newProviderDeleteCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a provider attached to no sandbox",
		Example: `  portcullis sandbox providers detach orders github && portcullis provider delete github`,
		Args:    args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return unary(env, func(api *apiclient.Client) (*portcullisv1.DeleteProviderResponse, error) {
				return api.Provider.DeleteProvider(cmd.Context(), &portcullisv1.DeleteProviderRequest{Name: a[0]})
			}, func(*portcullisv1.DeleteProviderResponse) error {
				fmt.Fprintf(env.stdout, "provider %s deleted\n", a[0])
				return nil
			})
		},
	}
}

// withProviders adds sandbox providers to the sandbox command of the full
// binary.
func withProviders(sandbox *cobra.Command, env *environment) *cobra.Command {
	sandbox.AddCommand(newSandboxProvidersCmd(env))
	return sandbox
}

func newSandboxProvidersCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("providers", "Attach credential providers to a sandbox, or detach them",
		`  portcullis sandbox providers attach orders github
  portcullis sandbox providers detach orders github`)
	for _, attach := range []bool{true, false} {
		verb, short := "detach", "Take a provider's credential away from a sandbox's proxies"
		if attach {
			verb, short = "attach", "Let a sandbox's proxies use a provider's credential"
		}
		var wait time.Duration
		c := &cobra.Command{
			Use:     verb + " SANDBOX PROVIDER",
			Short:   short + " (admin)",
			Example: "  portcullis sandbox providers " + verb + " orders github",
			Args:    args("SANDBOX", "PROVIDER"),
			RunE: func(cmd *cobra.Command, a []string) error {
				api, s, err := callGateway(env, func(api *apiclient.Client) (*portcullisv1.Sandbox, error) {
					if attach {
						return api.Sandbox.AttachProvider(cmd.Context(), &portcullisv1.AttachProviderRequest{Sandbox: a[0], Provider: a[1]})
					}
					return api.Sandbox.DetachProvider(cmd.Context(), &portcullisv1.DetachProviderRequest{Sandbox: a[0], Provider: a[1]})
				})
				if err := answer(env, jsonOptions, func(s *portcullisv1.Sandbox) error {
					fmt.Fprintf(env.stdout, "providers of sandbox %s: %s\n", s.GetName(), apitext.ListOrNone(s.GetProviders()))
					return nil
				})(s, err); err != nil {
					return err
				}
				return awaitCredentials(cmd, env, api, []string{a[0]}, wait)
			},
		}
		c.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait for the proxies to hold the change (`D`; 0: not at all)")
		cmd.AddCommand(c)
	}
	return cmd
}
