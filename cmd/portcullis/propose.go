package main

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// newProposeCmd is `portcullis propose`: a sandbox asks for more access.
func newProposeCmd(env *environment) *cobra.Command {
	var (
		file, denialID, rationale, idempotencyKey, arguments string
	)
	cmd := &cobra.Command{
		Use:   "propose (-f FILE | --from-denial ID [--arguments JSON] [--rationale R] [--idempotency-key K])",
		Short: "Submit a proposal to widen the sandbox's policy (with the sandbox's token)",
		Long: `Submit a proposal for the sandbox whose token is given (--token-file,
--token or PORTCULLIS_TOKEN). Either -f FILE, a proposal file (YAML or
JSON: rationale, optional base_version and idempotency_key, operations),
sent unchanged; or --from-denial ID, the denial_id of a denied request
('portcullis logs SANDBOX --decision deny' shows them), for which the
gateway builds the narrowest proposal that would have allowed it.

A tools/call refused by an arguments_schema is proposed with exactly its
arguments (a rule for the tool with arguments_schema {"const": …}); the
gateway's record of the denial holds only their digest, so give them with
--arguments JSON (or @FILE, @- for stdin): they must be the denied ones.
Through http://policy.local the proxy supplies them itself.

The gateway refuses a proposal that is not narrow (exit 2, naming the
operation, the field and the rule) and one submitted too soon after many
others (exit 1, with the time to wait). A filed proposal is pending until
an approver decides: the command prints its id, status, base version,
resulting hash and the prover's findings, each with a concrete request the
proposal would allow. Findings are for the approvers: filing succeeded,
so the exit code is 0. Submitting the same proposal (or the same
idempotency key) again answers the proposal already filed.

With -o json: the Proposal.`,
		Example: `  portcullis propose -f proposal.yaml --token-file orders.token
  portcullis propose --from-denial dn_0123456789abcdef --rationale "agents track shipments"
  portcullis propose --from-denial dn_0123456789abcdef --arguments '{"order_id":"x-17"}'
  portcullis propose -f - -o json < proposal.json | jq -r .id`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &portcullisv1.SubmitProposalRequest{}
			switch {
			case file != "" && denialID != "":
				return usagef("give -f FILE or --from-denial ID, not both")
			case file == "" && denialID == "":
				return usagef("%s needs -f FILE or --from-denial ID", cmd.CommandPath())
			case file != "":
				for _, flag := range []string{"rationale", "idempotency-key", "arguments"} {
					if cmd.Flags().Changed(flag) {
						return usagef("--%s goes with --from-denial; a proposal file carries its own", flag)
					}
				}
				doc, err := env.readInput(file)
				if err != nil {
					return err
				}
				req.Document = string(doc)
			default:
				req.DenialId = strings.TrimSpace(denialID)
				req.Rationale = rationale
				req.IdempotencyKey = idempotencyKey
				if name, ok := strings.CutPrefix(arguments, "@"); ok {
					data, err := env.readInput(name)
					if err != nil {
						return err
					}
					arguments = string(data)
				}
				req.Arguments = strings.TrimSpace(arguments)
			}
			api, err := env.client()
			if err != nil {
				return err
			}
			p, err := api.Advisor.SubmitProposal(cmd.Context(), req)
			if err != nil {
				return apiclient.ProposalError(err)
			}
			if env.jsonOutput() {
				return env.printJSON(p)
			}
			apitext.Proposal(env.stdout, p, false)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "proposal `FILE` (YAML or JSON; - reads stdin)")
	cmd.Flags().StringVar(&denialID, "from-denial", "", "propose what would have allowed the denied request `ID`")
	cmd.Flags().StringVar(&rationale, "rationale", "", "why the sandbox needs it (`TEXT`; with --from-denial)")
	cmd.Flags().StringVar(&arguments, "arguments", "", "the denied tools/call's arguments, `JSON` or @FILE (with --from-denial; for a denial by an arguments_schema)")
	cmd.Flags().StringVar(&idempotencyKey, "idempotency-key", "", "a `KEY` that makes a retry answer the proposal already filed (with --from-denial)")
	return cmd
}

// parseProposalID parses a proposal id (1 or more).
func parseProposalID(s string) (uint64, error) { return parseID("a proposal", s) }

// parseID parses an id (1 or more) of what ("a proposal").
func parseID(what, s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id < 1 || strconv.FormatUint(id, 10) != s {
		return 0, usagef("ID must be %s id (1 or more), got %q", what, s)
	}
	return id, nil
}
