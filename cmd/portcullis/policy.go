package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func newPolicyCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("policy", "Store, read, compare, roll back, validate and format policies",
		`  portcullis policy validate policy.yaml
  portcullis policy set orders -f policy.yaml --expect-version 3
  portcullis policy history orders
  portcullis policy diff orders 3 4
  portcullis policy rollback orders --to 3`)
	cmd.AddCommand(
		newPolicySetCmd(env),
		newPolicyGetCmd(env),
		newPolicyHistoryCmd(env),
		newPolicyDiffCmd(env),
		newPolicyRollbackCmd(env),
		newPolicyValidateCmd(env),
		newPolicyFmtCmd(env),
	)
	return cmd
}

func newPolicySetCmd(env *environment) *cobra.Command {
	var (
		file   string
		expect int64
		force  bool
		wait   waitFlags
	)
	cmd := &cobra.Command{
		Use:   "set SANDBOX -f FILE [--expect-version N] [--wait]",
		Short: "Store a policy document as the sandbox's next version",
		Long: `Store FILE (YAML or JSON; - reads stdin) as the sandbox's next policy
version. The gateway validates it and lists every problem with its field
path (exit 2). With --expect-version, the store happens only if N is still
the current version (0 for a sandbox without a policy); otherwise nothing is
stored and the exit code is 3. A document identical to the current version
stores nothing and reports it unchanged (--wait then follows the current
version). A document that takes away what approved proposals granted
(grants not yet expired: an edit of an older copy) is refused, naming
them, and nothing is stored (exit 3), unless --force, or --expect-version
is the current version and you confirm on a terminal.

` + waitHelp + `

With -o json: the stored version {version, hash, policy, …}.`,
		Example: `  portcullis policy set orders -f policy.yaml
  portcullis policy set orders -f policy.yaml --wait --wait-timeout 10s -o json
  portcullis policy get orders -o yaml | sed 's/443/8443/' | portcullis policy set orders -f - --expect-version 4`,
		Args: args("SANDBOX"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if file == "" {
				return need(cmd, "file")
			}
			expected, err := optionalVersion(cmd, "expect-version", expect)
			if err != nil {
				return err
			}
			if err := wait.check(cmd); err != nil {
				return err
			}
			doc, err := env.readInput(file)
			if err != nil {
				return err
			}
			return unaryWait(cmd.Context(), env, &wait, func(api *apiclient.Client) (*portcullisv1.PolicyVersion, error) {
				req := &portcullisv1.SetPolicyRequest{Sandbox: a[0], Document: string(doc), ExpectedVersion: expected, Force: force}
				pv, err := api.Policy.SetPolicy(cmd.Context(), req)
				if grants := apiclient.RemovedGrants(err); grants != nil && expected != nil && env.interactive {
					apitext.RemovedGrants(env.stderr, grants)
					if env.confirm("Take them away? Type yes to confirm: ", "yes") {
						req.RemoveGrants = apiclient.GrantIDs(grants)
						pv, err = api.Policy.SetPolicy(cmd.Context(), req)
					}
				}
				env.printWarnings(pv.GetWarnings())
				return pv, err
			}, versionOf, func(pv *portcullisv1.PolicyVersion) error {
				_, err := fmt.Fprintln(env.stdout, apitext.Stored(a[0], pv, 0))
				return err
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "policy `FILE`, YAML or JSON (- reads stdin)")
	cmd.Flags().Int64Var(&expect, "expect-version", 0, "store only if the current version is `N` (0: no policy yet)")
	cmd.Flags().BoolVar(&force, "force", false, "store even if it takes away what approved proposals granted")
	addWaitFlags(cmd, &wait)
	return cmd
}

// versionOf names the version a PolicyVersion answer committed.
func versionOf(pv *portcullisv1.PolicyVersion) (string, uint32) {
	return pv.GetSandbox(), pv.GetVersion()
}

func newPolicyGetCmd(env *environment) *cobra.Command {
	var version int64
	cmd := &cobra.Command{
		Use:   "get SANDBOX [--version N] [-o yaml|json]",
		Short: "Show a policy version (default: the current one)",
		Long: `Show a version of the sandbox's policy, by default the current one. -o yaml
prints the document alone in canonical form, ready to edit and set again;
-o json prints the whole version {version, hash, policy, …}.`,
		Example: `  portcullis policy get orders
  portcullis policy get orders --version 2 -o yaml > policy.yaml
  portcullis policy get orders -o json | jq .hash`,
		Annotations: map[string]string{annotationYAML: "true"},
		Args:        args("SANDBOX"),
		RunE: func(cmd *cobra.Command, a []string) error {
			v, err := flagVersion("version", version)
			if err != nil {
				return err
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.PolicyVersion, error) {
				return api.Policy.GetPolicy(cmd.Context(), &portcullisv1.GetPolicyRequest{Sandbox: a[0], Version: v})
			}, func(pv *portcullisv1.PolicyVersion) error {
				return apitext.PolicyVersion(env.stdout, pv, env.output == outputYAML)
			})
		},
	}
	cmd.Flags().Int64Var(&version, "version", 0, "version `N` to show (default: current)")
	return cmd
}

func newPolicyHistoryCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "history SANDBOX",
		Short: "List a sandbox's policy versions, oldest first, with their source",
		Example: `  portcullis policy history orders
  portcullis policy history orders -o json | jq '.versions[-1].version'`,
		Args: args("SANDBOX"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.ListPolicyVersionsResponse, error) {
				return api.Policy.ListPolicyVersions(cmd.Context(), &portcullisv1.ListPolicyVersionsRequest{Sandbox: a[0]})
			}, (*portcullisv1.ListPolicyVersionsResponse).GetVersions, apitext.PolicyVersions)
		},
	}
}

func newPolicyDiffCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "diff SANDBOX A B",
		Short: "Show the structural difference between two stored versions",
		Long: `Show what changed from version A to version B of the sandbox's policy, one
line per change: "+ path: what was added", "- path: what was removed",
"~ path: what changed (before → after)".`,
		Example: `  portcullis policy diff orders 3 4
  portcullis policy diff orders 1 4 -o json`,
		Args: args("SANDBOX", "A", "B"),
		RunE: func(cmd *cobra.Command, a []string) error {
			from, err := parseVersion("A", a[1])
			if err != nil {
				return err
			}
			to, err := parseVersion("B", a[2])
			if err != nil {
				return err
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.DiffPolicyResponse, error) {
				return api.Policy.DiffPolicy(cmd.Context(), &portcullisv1.DiffPolicyRequest{
					Sandbox: a[0], FromVersion: from, ToVersion: to,
				})
			}, func(res *portcullisv1.DiffPolicyResponse) error {
				apitext.PolicyDiff(env.stdout, a[0], res)
				return nil
			})
		},
	}
}

func newPolicyRollbackCmd(env *environment) *cobra.Command {
	var to, expect int64
	var wait waitFlags
	cmd := &cobra.Command{
		Use:   "rollback SANDBOX --to N [--expect-version N] [--wait]",
		Short: "Make an earlier version's content the new current version",
		Long: `Store the content of version N as the sandbox's next version (history is
never rewritten). With --expect-version, only if that is still the current
version; otherwise nothing is stored and the exit code is 3.

` + waitHelp,
		Example: `  portcullis policy rollback orders --to 3
  portcullis policy rollback orders --to 3 --wait
  portcullis policy rollback orders --to 3 --expect-version 5 -o json`,
		Args: args("SANDBOX"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if !cmd.Flags().Changed("to") {
				return need(cmd, "to")
			}
			toVersion, err := flagVersion("to", to)
			if err != nil || toVersion < 1 {
				return usagef("--to must be a version number (1 or more), got %d", to)
			}
			expected, err := optionalVersion(cmd, "expect-version", expect)
			if err != nil {
				return err
			}
			if err := wait.check(cmd); err != nil {
				return err
			}
			return unaryWait(cmd.Context(), env, &wait, func(api *apiclient.Client) (*portcullisv1.PolicyVersion, error) {
				pv, err := api.Policy.RollbackPolicy(cmd.Context(), &portcullisv1.RollbackPolicyRequest{
					Sandbox: a[0], ToVersion: toVersion, ExpectedVersion: expected,
				})
				env.printWarnings(pv.GetWarnings())
				return pv, err
			}, versionOf, func(pv *portcullisv1.PolicyVersion) error {
				_, err := fmt.Fprintln(env.stdout, apitext.Stored(a[0], pv, to))
				return err
			})
		},
	}
	cmd.Flags().Int64Var(&to, "to", 0, "version `N` whose content becomes current")
	cmd.Flags().Int64Var(&expect, "expect-version", 0, "roll back only if the current version is `N`")
	addWaitFlags(cmd, &wait)
	return cmd
}
