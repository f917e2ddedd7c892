package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/prover"
)

// proposalStatuses are the values of Proposal.status (DESIGN.md).
var proposalStatuses = []string{"pending", "approved", "applied", "rejected", "expired", "superseded", "withdrawn"}

// findingKinds are the values of Finding.kind, for --finding.
var findingKinds = []string{
	prover.NewReach, prover.NewPath, prover.NewHTTPMethod, prover.NewMCPMethod, prover.NewMCPTool, prover.NewMCPPrompt, prover.NewMCPResource,
	prover.NewCredentialedReach, prover.L7BypassCredentialed, prover.PrivateNetwork, prover.WildcardWidening, prover.ExceedsBoundary,
	prover.ArgumentsWidened, prover.RateLimitWidened, prover.ToolDefinitionChanged, prover.MCPOAuthOpened, prover.EnforcementWeakened, prover.CloudMetadata,
	prover.ReviewRemoved, prover.ReviewAdded,
}

// whoSees is the paragraph every reading command's help shares.
const whoSees = `With an operator or admin token, list and show read the approval queue of
every sandbox (ApprovalService). With a sandbox's token, which the
approval queue refuses (PermissionDenied), they fall back to the
sandbox's own proposals (AdvisorService): the sandbox follows its
proposals, never decides them.`

func newProposalsCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("proposals", "The approval queue: list, show, approve, reject, withdraw proposals",
		`  portcullis proposals list --status pending
  portcullis proposals show 12
  portcullis proposals approve 12 --reason "narrow, ticket 8812"
  portcullis proposals reject 12 --reason "use the carrier's API instead"
  portcullis proposals withdraw 12 --reason "no longer needed" --token-file orders.token`)
	cmd.Long = `The approval queue from a terminal. Operators and admins list and show the
proposals of every sandbox, approve them (after seeing the diff and the
prover's findings) and reject them. A sandbox's token lists and shows the
sandbox's own proposals and withdraws one still pending; it can never
approve or reject.

` + whoSees
	cmd.AddCommand(
		newProposalsListCmd(env),
		newProposalsShowCmd(env),
		newProposalsApproveCmd(env),
		newProposalsRejectCmd(env),
		newProposalsWithdrawCmd(env),
	)
	return cmd
}

func newProposalsListCmd(env *environment) *cobra.Command {
	var status, sandbox, finding string
	cmd := &cobra.Command{
		Use:   "list [--status S] [--sandbox NAME] [--finding KIND]",
		Short: "List proposals, newest first",
		Long: `List proposals, newest first: id, sandbox (for operators), status, approvals
counted of those needed (for operators), when it was created, its findings
(how many, and their kinds) and the start of its rationale.

--status narrows the list to one of: ` + strings.Join(proposalStatuses, ", ") + `.
--sandbox to one sandbox, --finding to proposals with a finding of that
kind (` + strings.Join(findingKinds, ", ") + `).

` + whoSees + ` A sandbox token sees no sandbox column;
--sandbox and --finding then filter its own proposals.

With -o json: {"proposals": [...]}.`,
		Example: `  portcullis proposals list
  portcullis proposals list --status pending --finding new_credentialed_reach
  portcullis proposals list --sandbox orders -o json | jq -r '.proposals[].id'`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if status != "" && !slices.Contains(proposalStatuses, status) {
				return usagef("--status must be one of %s, got %q", strings.Join(proposalStatuses, ", "), status)
			}
			if finding != "" && !slices.Contains(findingKinds, finding) {
				return usagef("--finding must be one of %s, got %q", strings.Join(findingKinds, ", "), finding)
			}
			if cmd.Flags().Changed("sandbox") && strings.TrimSpace(sandbox) == "" {
				return usagef("--sandbox is empty")
			}
			api, err := env.client()
			if err != nil {
				return err
			}
			res, operator, err := api.Proposals(cmd.Context(), apiclient.ProposalFilter{Status: status, Sandbox: sandbox, Finding: finding})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(res)
			}
			return apitext.Proposals(env.stdout, res.GetProposals(), operator)
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "list only proposals with status `S` (pending, applied, …)")
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "list only the proposals of sandbox `NAME`")
	cmd.Flags().StringVar(&finding, "finding", "", "list only proposals with a finding of `KIND` (new_reach, …)")
	return cmd
}

func newProposalsShowCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one proposal: changes, findings, approvals and status",
		Long: `Show one proposal in full: status, base version and resulting hash (the
hash an approval confirms), rationale and proposer, the structural changes
it makes to its base version, the prover's findings with a request each,
and why its status changed (reason, rebase error, superseding proposal).
Then its decision: the approvals so far (who, when, why; an approval of an
earlier resulting hash no longer counts), how many are needed, whether the
approval rules would apply it without a human and their notes, when a
pending proposal expires, when the grant ends, the version it became, and
who decided it when.

` + whoSees + ` The sandbox's view has no quorum.

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
			p, operator, err := api.Proposal(cmd.Context(), id)
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				return env.printJSON(p)
			}
			apitext.Proposal(env.stdout, p, true)
			apitext.Decision(env.stdout, p, operator)
			return nil
		},
	}
}

func newProposalsApproveCmd(env *environment) *cobra.Command {
	var reason, hash, until string
	var wait waitFlags
	cmd := &cobra.Command{
		Use:   "approve ID --reason R [--hash H] [--until TIME]",
		Short: "Approve a proposal: shows its diff and findings, then approves that hash",
		Long: `Approve a pending proposal (operator or admin token). The command fetches
the proposal, prints what is being approved — the changes to its base
version, the prover's findings with a request each, the approvals so far —
and approves the resulting hash it printed. --hash H approves H instead:
the resulting_hash a script reviewed ('proposals show ID -o json'). Either
way, if the proposal changed since (re-based onto a newer version, so its
resulting policy differs), the gateway refuses: a conflict (exit 3); show
it again and approve what it is now.

--reason is required and kept with the approval. --until ends the grant:
an RFC 3339 time (2026-12-31T18:00:00Z) or a duration from now (8h, 90m,
7d); the rules the proposal adds carry it as expires_at, proxies stop
honouring them then, and the gateway removes them.

When the approvals reach the quorum the approval rules ask for, the
proposal is applied as the sandbox's next policy version and pushed;
otherwise it waits for more approvers. Each approver counts once, the
proposing sandbox never approves (exit 1), and a proposal no longer
pending, one that no longer applies, a second approval by the same
approver or a frozen sandbox is a conflict (exit 3).

` + waitHelp + ` An approval short of the quorum commits nothing: --wait
then says so and returns.

With -o json (which needs --hash: a script approves what it reviewed):
the Proposal after the approval.`,
		Example: `  portcullis proposals approve 12 --reason "narrow; ticket 8812"
  portcullis proposals approve 12 --reason "narrow; ticket 8812" --wait
  portcullis proposals approve 12 --reason "incident 42" --until 8h
  H=$(portcullis proposals show 12 -o json | jq -r .resulting_hash)
  portcullis proposals approve 12 --reason "reviewed in CI" --hash "$H" -o json`,
		Args: args("ID"),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := parseProposalID(a[0])
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				return need(cmd, "reason")
			}
			if err := wait.check(cmd); err != nil {
				return err
			}
			if cmd.Flags().Changed("hash") && strings.TrimSpace(hash) == "" {
				return usagef("--hash is empty")
			}
			hash = strings.TrimSpace(hash)
			if env.jsonOutput() && hash == "" {
				return usagef("-o json approves without showing the diff: give --hash H, the resulting_hash you reviewed ('portcullis proposals show %d -o json')", id)
			}
			var grantEnd *timestamppb.Timestamp
			if until != "" {
				end, err := parseUntil(until, time.Now())
				if err != nil {
					return err
				}
				grantEnd = timestamppb.New(end)
			}
			api, err := env.client()
			if err != nil {
				return err
			}
			shown := ""
			if !env.jsonOutput() {
				p, err := api.Approval.GetProposal(cmd.Context(), &portcullisv1.GetProposalRequest{Id: id})
				if err != nil {
					return err
				}
				apitext.Proposal(env.stdout, p, true)
				apitext.Decision(env.stdout, p, true)
				shown = p.GetResultingHash()
				fmt.Fprintln(env.stdout)
				if hash != "" && hash != shown {
					fmt.Fprintf(env.stderr, "warning: --hash %s is not the resulting hash shown above (%s)\n", hash, dash(shown))
				}
				if hash == "" {
					hash = shown
				}
			}
			res, err := api.Approval.ApproveProposal(cmd.Context(), &portcullisv1.ApproveProposalRequest{
				Id: id, Reason: reason, ResultingHash: hash, GrantExpiresAt: grantEnd,
			})
			if err != nil {
				return err
			}
			var enf enforced
			if wait.wait {
				var v uint32 // an approval short of the quorum commits nothing
				if res.GetStatus() == "applied" {
					v = res.GetAppliedVersion()
				}
				enf = awaitVersion(cmd.Context(), env, api, res.GetSandbox(), v, wait.timeout)
			}
			return env.printEnforced(res, func() error {
				_, err := fmt.Fprintln(env.stdout, apitext.ApprovalOutcome(res, hash))
				return err
			}, enf)
		},
	}
	addWaitFlags(cmd, &wait)
	cmd.Flags().StringVar(&reason, "reason", "", "why you approve (`TEXT`, required; kept with the approval)")
	cmd.Flags().StringVar(&hash, "hash", "", "approve resulting hash `H` (the one a script reviewed) instead of the one shown")
	cmd.Flags().StringVar(&until, "until", "", "end the grant at `TIME`: RFC 3339, or a duration from now (8h, 7d)")
	return cmd
}

// parseUntil reads --until (apiclient.Until).
func parseUntil(s string, now time.Time) (time.Time, error) { return timeFlag(apiclient.Until(s, now)) }

func newProposalsRejectCmd(env *environment) *cobra.Command {
	return newReasonCmd(env, reasonCmd[uint64, *portcullisv1.Proposal]{
		use:   "reject ID --reason R",
		short: "Reject a pending proposal",
		long: `Reject a pending proposal (operator or admin token), with the reason kept
on the proposal: the sandbox sees it. A proposal no longer pending is a
conflict (exit 3). With -o json: the Proposal.`,
		example:    `  portcullis proposals reject 12 --reason "use the carrier's public API instead"`,
		reasonHelp: "why it is rejected (`TEXT`, required; the sandbox sees it)",
		arg:        "ID",
		parse:      parseProposalID,
		needReason: true,
		call: func(ctx context.Context, api *apiclient.Client, id uint64, reason string) (*portcullisv1.Proposal, error) {
			return api.Approval.RejectProposal(ctx, &portcullisv1.RejectProposalRequest{Id: id, Reason: reason})
		},
		done: proposalStatusLine,
	})
}

func newProposalsWithdrawCmd(env *environment) *cobra.Command {
	return newReasonCmd(env, reasonCmd[uint64, *portcullisv1.Proposal]{
		use:   "withdraw ID [--reason R]",
		short: "Withdraw one of the sandbox's pending proposals (with its token)",
		long: `Withdraw a pending proposal, with the token of the sandbox that filed it:
it leaves the approval queue for good. A proposal no longer pending
(decided, expired, superseded or withdrawn) is a conflict (exit 3).
Operators reject instead. With -o json: the Proposal.`,
		example: `  portcullis proposals withdraw 12 --token-file orders.token
  portcullis proposals withdraw 12 --reason "filed the wrong host"`,
		reasonHelp: "why it is withdrawn (`TEXT`, kept with the proposal)",
		arg:        "ID",
		parse:      parseProposalID,
		call: func(ctx context.Context, api *apiclient.Client, id uint64, reason string) (*portcullisv1.Proposal, error) {
			return api.Advisor.WithdrawProposal(ctx, &portcullisv1.WithdrawProposalRequest{Id: id, Reason: reason})
		},
		done: proposalStatusLine,
	})
}

// proposalStatusLine says where a proposal stands after reject or
// withdraw.
func proposalStatusLine(p *portcullisv1.Proposal) string {
	return fmt.Sprintf("proposal %d %s", p.GetId(), dash(p.GetStatus()))
}
