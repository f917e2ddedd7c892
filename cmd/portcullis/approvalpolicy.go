package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func newApprovalPolicyCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("approval-policy", "Show or replace the Rego approval rules",
		`  portcullis approval-policy get > rules.rego
  portcullis approval-policy set -f rules.rego`)
	cmd.Long = `The approval rules decide, for each proposal, how many distinct approvers it
needs, whether it may apply without a human, and extra reasons to refuse
it. They are one Rego module (package portcullis.approval), stored in the
gateway's database: versioned, audited and the same on every replica.
Until an admin sets one, the built-in rules (version 0: one human approval
for every proposal) apply. Whatever the rules say, a proposal with a
blocking finding never applies without a human.`
	cmd.AddCommand(newApprovalPolicyGetCmd(env), newApprovalPolicySetCmd(env))
	return cmd
}

func newApprovalPolicyGetCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "Print the approval rules in force (the Rego module)",
		Long: `Print the Rego module in force on stdout, exactly as stored, so that it
can be edited and set again; its version, hash, author and time go to
stderr. Operators and admins.

With -o json: the ApprovalPolicy {version, module, hash, author, created_at}.`,
		Example: `  portcullis approval-policy get > rules.rego
  portcullis approval-policy get -o json | jq -r .version`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return unary(env, func(api *apiClients) (*portcullisv1.ApprovalPolicy, error) {
				return api.approval.GetApprovalPolicy(cmd.Context(), &portcullisv1.GetApprovalPolicyRequest{})
			}, func(ap *portcullisv1.ApprovalPolicy) error {
				fmt.Fprintf(env.stderr, "approval rules %s\n", apitext.ApprovalPolicyLabel(ap))
				_, err := io.WriteString(env.stdout, ap.GetModule())
				return err
			})
		},
	}
}

func newApprovalPolicySetCmd(env *environment) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "set -f FILE.rego",
		Short: "Replace the approval rules (admin)",
		Long: `Store a Rego module (package portcullis.approval) as the next version of the
approval rules (admin token). The gateway compiles it and runs it against
sample proposals first: a module that does not compile, or answers
something other than what the rules must answer, is refused (exit 2, with
the reason) and the rules in force stay. Prints the new version and its
hash; with -o json the ApprovalPolicy.`,
		Example: `  portcullis approval-policy set -f rules.rego
  portcullis approval-policy get | sed 's/:= 1/:= 2/' | portcullis approval-policy set -f -`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("%s needs -f FILE", cmd.CommandPath())
			}
			module, err := env.readInput(file)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(module)) == "" {
				return inputErr(fmt.Errorf("%s is empty", displayName(file)))
			}
			return unary(env, func(api *apiClients) (*portcullisv1.ApprovalPolicy, error) {
				return api.approval.SetApprovalPolicy(cmd.Context(), &portcullisv1.SetApprovalPolicyRequest{Module: string(module)})
			}, func(ap *portcullisv1.ApprovalPolicy) error {
				fmt.Fprintf(env.stdout, "approval rules %s\n", apitext.ApprovalPolicyLabel(ap))
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "Rego module `FILE` (- reads stdin)")
	return cmd
}
