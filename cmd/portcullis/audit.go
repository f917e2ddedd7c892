package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func newAuditCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("audit", "Read and verify the audit log",
		`  portcullis audit verify
  portcullis audit list --sandbox orders --limit 20`)
	cmd.Long = `The audit log records every change: who, what, when, the hashes before and
after. It is a hash chain: each entry carries the hash of the one before it,
in one order across every gateway replica, so an edited, removed or inserted
row breaks the chain from that entry on. The gateway logs the head of the
chain ("audit head", with seq and hash) whenever it moves; keep those lines
somewhere the database's owners cannot rewrite, and compare the head that
'audit verify' prints with them.`
	cmd.AddCommand(newAuditVerifyCmd(env), newAuditListCmd(env))
	return cmd
}

func newAuditVerifyCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Check the hash chain of the audit log",
		Long: `Ask the gateway to recompute the audit log's hash chain from its first entry
to its head.

Exit 0 when every entry matches: prints the number of entries and the head
hash (compare it with the "audit head" lines of the gateway's log). Exit 1
when an entry does not: prints its seq and the problem (content changed,
prev_hash mismatch, gap in seq, head mismatch). With -o json: the
VerifyAuditResponse, in either case.`,
		Example: `  portcullis audit verify
  portcullis audit verify -o json | jq -r .head_hash`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := env.client()
			if err != nil {
				return err
			}
			res, err := api.Audit.VerifyAudit(cmd.Context(), &portcullisv1.VerifyAuditRequest{})
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				err = env.printJSON(res)
			} else if res.GetOk() {
				_, err = fmt.Fprintf(env.stdout, "audit log verified: %d entries, head %s\n", res.GetEntries(), dash(res.GetHeadHash()))
			} else {
				_, err = fmt.Fprintf(env.stdout, "audit log broken at seq %d: %s\n%d entries before it verified, the last with hash %s\n",
					res.GetFirstBadSeq(), res.GetProblem(), res.GetEntries(), dash(res.GetHeadHash()))
			}
			if err != nil {
				return err
			}
			if !res.GetOk() {
				return &chainBrokenError{seq: res.GetFirstBadSeq()}
			}
			return nil
		},
	}
}

// chainBrokenError: the audit chain does not verify (exit 1); the details
// were printed.
type chainBrokenError struct{ seq int64 }

func (e *chainBrokenError) Error() string {
	return fmt.Sprintf("the audit log's hash chain is broken at seq %d", e.seq)
}

func newAuditListCmd(env *environment) *cobra.Command {
	var (
		sandbox string
		limit   int
	)
	cmd := &cobra.Command{
		Use:   "list [--sandbox S] [--limit N]",
		Short: "List audit entries, newest first",
		Long: `List audit entries, newest first: seq, time, actor, action, sandbox, target
and details. --limit caps them (default 100, at most 1000); --sandbox keeps
one sandbox's, deleted sandboxes included. With -o json: the
ListAuditResponse, with each entry's prev_hash and hash.`,
		Example: `  portcullis audit list
  portcullis audit list --sandbox orders --limit 20 -o json`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLimit(cmd, limit, maxLogLimit); err != nil {
				return err
			}
			return unaryTable(env, func(api *apiclient.Client) (*portcullisv1.ListAuditResponse, error) {
				return api.Audit.ListAudit(cmd.Context(), &portcullisv1.ListAuditRequest{Sandbox: sandbox, Limit: uint32(limit)})
			}, (*portcullisv1.ListAuditResponse).GetEntries, apitext.Audit)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sandbox, "sandbox", "", "only the entries of `SANDBOX`")
	f.IntVar(&limit, "limit", 0, "show the newest `N` entries (default 100)")
	return cmd
}
