package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// callStatuses are the values of HeldCall.status.
var callStatuses = []string{"held", "approved", "denied", "expired", "failed"}

func newCallsCmd(env *environment) *cobra.Command {
	cmd := newGroupCmd("calls", "Held calls: list, show, approve, deny calls a review rule holds",
		`  portcullis calls list --status held
  portcullis calls show 7
  portcullis calls approve 7 --reason "refund agreed on ticket 8812"
  portcullis calls deny 7 --reason "not this customer"`)
	cmd.Long = `A held call is an in-flight request that an allow rule with review:
{required: true, timeout: D} holds at the proxy while the agent waits, until
an operator or admin approves it (it is forwarded once) or denies it, or its
deadline passes. A sandbox token never decides. See docs/held-calls.md.`
	cmd.AddCommand(newCallsListCmd(env), newCallsShowCmd(env), newCallsApproveCmd(env), newCallsDenyCmd(env))
	return cmd
}

func newCallsListCmd(env *environment) *cobra.Command {
	var status string
	cmd := &cobra.Command{
		Use:   "list [SANDBOX] [--status S]",
		Short: "List held calls, newest first",
		Long: `List held calls, newest first: id, sandbox, tool (or HTTP method and path),
status, the time left to decide (or when decided) and the proxy. SANDBOX and
--status (` + strings.Join(callStatuses, ", ") + `) narrow the list.
With -o json: {"calls": [...], "held": N}, N the calls still held.`,
		Example: `  portcullis calls list
  portcullis calls list orders --status held -o json | jq -r '.calls[].id'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if status != "" && !slices.Contains(callStatuses, status) {
				return usagef("--status must be one of %s, got %q", strings.Join(callStatuses, ", "), status)
			}
			if len(a) == 1 && strings.TrimSpace(a[0]) == "" {
				return usagef("SANDBOX is empty")
			}
			req := &portcullisv1.ListCallsRequest{Status: status, Sandbox: strings.Join(a, "")} // SANDBOX, or "" for all
			return unary(env, func(api *apiclient.Client) (*portcullisv1.ListCallsResponse, error) {
				return api.Calls.ListCalls(cmd.Context(), req)
			}, func(res *portcullisv1.ListCallsResponse) error {
				return apitext.Calls(env.stdout, res.GetCalls(), time.Now())
			})
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "list only calls with status `S` (held, approved, …)")
	return cmd
}

func newCallsShowCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one held call with its arguments",
		Long: `Show one held call: where it goes, who made it, the rule holding it, its
deadline and decision, and its arguments pretty-printed with every number as
the agent wrote it (kept until decided and a retention after; then only
their digest). With -o json: the HeldCall.`,
		Example: `  portcullis calls show 7
  portcullis calls show 7 -o json | jq -r .arguments_json`,
		Args: args("ID"),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := parseCallID(a[0])
			if err != nil {
				return err
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.HeldCall, error) {
				return api.Calls.GetCall(cmd.Context(), &portcullisv1.GetCallRequest{Id: id})
			}, func(c *portcullisv1.HeldCall) error { return apitext.Call(env.stdout, c, time.Now()) })
		},
	}
}

func newCallsApproveCmd(env *environment) *cobra.Command {
	var reason string
	var remember bool
	cmd := &cobra.Command{
		Use:   "approve ID --reason R [--remember]",
		Short: "Approve a held call: shows it, then releases exactly it",
		Long: `Approve a held call (operator or admin token): the command prints the call
and approves it bound to the arguments digest it printed; its proxy forwards
it once. --reason is required. --remember also files a proposal (prover and
approval rules as any) allowing these exact arguments without review, and
prints its id. A call no longer held is a conflict (exit 3).
With -o json: the HeldCall after the approval.`,
		Example: `  portcullis calls approve 7 --reason "refund agreed on ticket 8812"
  portcullis calls approve 7 --reason "weekly export" --remember`,
		Args: args("ID"),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := parseCallID(a[0])
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				return need(cmd, "reason")
			}
			return unary(env, func(api *apiclient.Client) (*portcullisv1.HeldCall, error) {
				c, err := api.Calls.GetCall(cmd.Context(), &portcullisv1.GetCallRequest{Id: id})
				if err != nil {
					return nil, err
				}
				if !env.jsonOutput() {
					_ = apitext.Call(env.stdout, c, time.Now()) // stdout's errors show on the outcome's line
				}
				return api.Calls.ApproveCall(cmd.Context(), &portcullisv1.ApproveCallRequest{
					Id: id, Reason: reason, ArgumentsDigest: c.GetArgumentsDigest(), Remember: remember})
			}, func(c *portcullisv1.HeldCall) error {
				_, err := fmt.Fprintln(env.stdout, apitext.CallOutcome(c))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why you approve (`TEXT`, required; kept with the call)")
	cmd.Flags().BoolVar(&remember, "remember", false, "also propose a rule that allows these exact arguments without review")
	return cmd
}

func newCallsDenyCmd(env *environment) *cobra.Command {
	return newReasonCmd(env, reasonCmd[uint64, *portcullisv1.HeldCall]{
		use:   "deny ID --reason R",
		short: "Deny a held call: nothing is forwarded",
		long: `Deny a held call (operator or admin token): nothing is forwarded and the
agent is answered review_denied. The reason is kept with the call. A call
no longer held is a conflict (exit 3). With -o json: the HeldCall.`,
		example:    `  portcullis calls deny 7 --reason "not this customer"`,
		reasonHelp: "why it is denied (`TEXT`, required; kept with the call)",
		arg:        "ID",
		parse:      parseCallID,
		needReason: true,
		call: func(ctx context.Context, api *apiclient.Client, id uint64, reason string) (*portcullisv1.HeldCall, error) {
			return api.Calls.DenyCall(ctx, &portcullisv1.DenyCallRequest{Id: id, Reason: reason})
		},
		done: apitext.CallOutcome,
	})
}

// parseCallID parses a held call's id (1 or more).
func parseCallID(s string) (uint64, error) { return parseID("a held call", s) }
