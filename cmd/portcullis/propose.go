package main

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
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
			printProposal(env, p, false)
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

// printProposal prints a proposal as propose does; full adds what
// `proposals show` shows: rationale, proposer, changes and the status's
// story.
func printProposal(env *environment, p *portcullisv1.Proposal, full bool) {
	w := env.stdout
	kv := []string{
		"id", strconv.FormatUint(p.GetId(), 10),
		"status", dash(p.GetStatus()),
		"base version", baseCell(p),
		"resulting hash", dash(p.GetResultingHash()),
	}
	if full {
		kv = append(kv,
			"sandbox", dash(p.GetSandbox()),
			"proposer", dash(p.GetProposer()),
			"created", when(p.GetCreatedAt()),
			"updated", when(p.GetUpdatedAt()),
		)
		if p.GetDenialId() != "" {
			kv = append(kv, "from denial", p.GetDenialId())
		}
		if p.GetIdempotencyKey() != "" {
			kv = append(kv, "idempotency key", p.GetIdempotencyKey())
		}
		if p.GetStatusReason() != "" {
			kv = append(kv, "status reason", oneLine(p.GetStatusReason()))
		}
		if p.GetSupersededBy() != 0 {
			kv = append(kv, "superseded by", strconv.FormatUint(p.GetSupersededBy(), 10))
		}
		if p.GetRebaseError() != "" {
			kv = append(kv, "rebase error", oneLine(p.GetRebaseError()))
		}
		kv = append(kv, "rationale", oneLine(p.GetRationale()))
	}
	_ = env.fields(kv...)
	if p.GetDeduplicated() {
		if p.GetStatus() == "pending" {
			fmt.Fprintln(w, "deduplicated: an identical proposal is already pending")
		} else {
			fmt.Fprintf(w, "deduplicated: this proposal was filed before (now %s)\n", dash(p.GetStatus()))
		}
	}
	if full {
		if changes := p.GetChanges(); len(changes) > 0 {
			fmt.Fprintf(w, "changes (%d):\n", len(changes))
			for _, c := range changes {
				fmt.Fprintf(w, "  %s\n", changeLine(c))
			}
		}
		printDefinitionChanges(w, p)
	}
	findings := p.GetFindings()
	if len(findings) == 0 {
		fmt.Fprintln(w, "findings: none")
		return
	}
	fmt.Fprintf(w, "findings (%d):\n", len(findings))
	for _, f := range findings {
		head := "  " + f.GetKind()
		if f.GetCredentialed() {
			head += " [credentialed]"
		}
		if where := findingWhere(f); where != "" {
			head += "  " + where
		}
		fmt.Fprintln(w, head)
		if f.GetDetail() != "" {
			fmt.Fprintf(w, "    %s\n", oneLine(f.GetDetail()))
		}
		if c := f.GetCounterexample(); c != nil {
			fmt.Fprintf(w, "    request: %s\n", requestLine(c))
		}
	}
}

// baseCell is "3 (sha256 3f2a…)", "-" when unset.
func baseCell(p *portcullisv1.Proposal) string {
	if p.GetBaseVersion() == 0 {
		return "-"
	}
	s := strconv.FormatUint(uint64(p.GetBaseVersion()), 10)
	if h := hashLabel(p.GetBaseHash()); h != "" {
		s += " (" + h + ")"
	}
	return s
}

// findingWhere locates a finding: "entry orders endpoint demo-mcp:8081/mcp rule rules[5]".
func findingWhere(f *portcullisv1.Finding) string {
	var parts []string
	for _, kv := range [][2]string{{"entry", f.GetEntry()}, {"endpoint", f.GetEndpoint()}, {"rule", f.GetRule()}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+" "+kv[1])
		}
	}
	return strings.Join(parts, " ")
}

// requestLine is a counterexample on one line: "BINARY → host:port METHOD
// /path?query mcp METHOD TOOL arguments {…}", the parts it has.
func requestLine(r *portcullisv1.ProvedRequest) string {
	var b strings.Builder
	bin := r.GetBinary()
	if bin == "" {
		bin = "any binary"
	}
	b.WriteString(bin)
	b.WriteString(" → ")
	b.WriteString(net.JoinHostPort(r.GetHost(), strconv.FormatUint(uint64(r.GetPort()), 10)))
	if a := r.GetAddr(); a != "" && a != r.GetHost() {
		b.WriteString(" (" + a + ")")
	}
	if m := r.GetHttpMethod(); m != "" {
		b.WriteString(" " + m)
	}
	if path := r.GetPath(); path != "" {
		b.WriteString(" " + path)
		if q := r.GetQuery(); q != "" {
			b.WriteString("?" + q)
		}
	}
	if m := r.GetMcpMethod(); m != "" {
		b.WriteString(" mcp " + m)
		if tool := r.GetTool(); tool != "" {
			b.WriteString(" " + tool)
		}
		if args := r.GetArguments(); args != "" {
			b.WriteString(" arguments " + oneLine(args))
		}
	}
	return b.String()
}

// oneLine puts a value the gateway sent on one line (white space and
// control characters become one space), uncut.
func oneLine(s string) string {
	return clip(s, math.MaxInt)
}

// parseProposalID parses a proposal id (1 or more).
func parseProposalID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id < 1 || strconv.FormatUint(id, 10) != s {
		return 0, usagef("ID must be a proposal id (1 or more), got %q", s)
	}
	return id, nil
}
