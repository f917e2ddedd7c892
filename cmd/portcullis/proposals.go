package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// proposalStatuses are the values of Proposal.status (DESIGN.md).
var proposalStatuses = []string{"pending", "approved", "applied", "rejected", "expired", "superseded", "withdrawn"}

// maxRationaleCell is how much of a rationale the list shows.
const maxRationaleCell = 48

func newProposalsCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("proposals", "List, show and withdraw the sandbox's proposals (with its token)",
		`  portcullis proposals list --status pending
  portcullis proposals show 12
  portcullis proposals withdraw 12 --reason "no longer needed"`)
	cmd.Long = `The sandbox's proposals, seen with the sandbox's own token: list them,
show one in full, withdraw one still pending. Approving and rejecting
(approve, reject) come with the approval workflow; they are not part of
this client yet.`
	cmd.AddCommand(
		newProposalsListCmd(env),
		newProposalsShowCmd(env),
		newProposalsWithdrawCmd(env),
	)
	return cmd
}

func newProposalsListCmd(env *environment) *cobra.Command {
	var status string
	cmd := &cobra.Command{
		Use:   "list [--status S]",
		Short: "List the sandbox's proposals, newest first",
		Long: `List the sandbox's proposals, newest first: id, status, when it was
created, its findings (how many, and their kinds) and the start of its
rationale. --status narrows the list to one of: ` + strings.Join(proposalStatuses, ", ") + `.
With -o json: {"proposals": [...]}.`,
		Example: `  portcullis proposals list
  portcullis proposals list --status pending -o json | jq -r '.proposals[].id'`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if status != "" && !validStatus(status) {
				return usagef("--status must be one of %s, got %q", strings.Join(proposalStatuses, ", "), status)
			}
			api, err := env.client()
			if err != nil {
				return err
			}
			res, err := api.advisor.ListProposals(cmd.Context(), &portcullisv1.ListProposalsRequest{Status: status})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(res)
			}
			tw := env.table("ID", "STATUS", "CREATED", "FINDINGS", "RATIONALE")
			for _, p := range res.GetProposals() {
				row(tw, strconv.FormatUint(p.GetId(), 10), dash(p.GetStatus()), when(p.GetCreatedAt()),
					findingsCell(p.GetFindings()), dash(clip(p.GetRationale(), maxRationaleCell)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "list only proposals with status `S` (pending, applied, …)")
	return cmd
}

func newProposalsShowCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one proposal: findings, changes and status",
		Long: `Show one of the sandbox's proposals in full: status, base version and
resulting hash, rationale and proposer, the structural changes it makes to
its base version, the prover's findings with a request each, and why its
status changed (reason, rebase error, superseding proposal).

With -o json: the Proposal.`,
		Example: `  portcullis proposals show 12
  portcullis proposals show 12 -o json | jq -r .resulting_hash`,
		Args: args("ID"),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := parseProposalID(a[0])
			if err != nil {
				return err
			}
			api, err := env.client()
			if err != nil {
				return err
			}
			p, err := api.advisor.GetProposal(cmd.Context(), &portcullisv1.GetProposalRequest{Id: id})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(p)
			}
			printProposal(env, p, true)
			return nil
		},
	}
}

func newProposalsWithdrawCmd(env *environment) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "withdraw ID [--reason R]",
		Short: "Withdraw one of the sandbox's pending proposals",
		Long: `Withdraw a pending proposal: it leaves the approval queue for good. A
proposal no longer pending (decided, expired, superseded or withdrawn) is
a conflict (exit 3). With -o json: the Proposal.`,
		Example: `  portcullis proposals withdraw 12
  portcullis proposals withdraw 12 --reason "filed the wrong host"`,
		Args: args("ID"),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := parseProposalID(a[0])
			if err != nil {
				return err
			}
			api, err := env.client()
			if err != nil {
				return err
			}
			p, err := api.advisor.WithdrawProposal(cmd.Context(), &portcullisv1.WithdrawProposalRequest{Id: id, Reason: reason})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(p)
			}
			fmt.Fprintf(env.stdout, "proposal %d %s\n", p.GetId(), dash(p.GetStatus()))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it is withdrawn (`TEXT`, kept with the proposal)")
	return cmd
}

func validStatus(s string) bool {
	for _, v := range proposalStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// findingsCell is "0", or the count and the distinct kinds: "2 (new_mcp_tool, new_reach)".
func findingsCell(findings []*portcullisv1.Finding) string {
	if len(findings) == 0 {
		return "0"
	}
	var kinds []string
	seen := map[string]bool{}
	for _, f := range findings {
		if k := f.GetKind(); !seen[k] {
			seen[k] = true
			kinds = append(kinds, k)
		}
	}
	return fmt.Sprintf("%d (%s)", len(findings), strings.Join(kinds, ", "))
}
