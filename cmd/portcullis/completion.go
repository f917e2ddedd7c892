package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// addCompletions gives shell completion of sandbox names and proposal ids,
// asked of the gateway the command would talk to (its --gateway and
// token), to every command that takes one as its first argument — found by
// the argument's name in the command's Use line, so a new command gets it
// by naming its argument SANDBOX or [SANDBOX] (or NAME under `sandbox`) or ID under
// `proposals` — and to every --sandbox flag.
func addCompletions(root *cobra.Command, env *environment) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if fields := strings.Fields(c.Use); len(fields) > 1 && c.ValidArgsFunction == nil {
			parent := ""
			if c.HasParent() {
				parent = c.Parent().Name()
			}
			switch {
			case fields[1] == "SANDBOX", fields[1] == "[SANDBOX]", fields[1] == "NAME" && parent == "sandbox":
				c.ValidArgsFunction = completeFirst(func(ctx context.Context) []string { return sandboxNames(ctx, env) })
			case fields[1] == "ID" && parent == "proposals":
				c.ValidArgsFunction = completeFirst(func(ctx context.Context) []string { return pendingProposals(ctx, env) })
			}
		}
		if c.LocalFlags().Lookup("sandbox") != nil {
			c.RegisterFlagCompletionFunc("sandbox", func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
				return sandboxNames(cmd.Context(), env), cobra.ShellCompDirectiveNoFileComp
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeFirst completes the first positional argument with what list returns.
func completeFirst(list func(context.Context) []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return list(cmd.Context()), cobra.ShellCompDirectiveNoFileComp
	}
}

// completionTimeout bounds a completion's call to the gateway: a shell
// waiting on a TAB must not hang on an unreachable one.
const completionTimeout = 2 * time.Second

// sandboxNames lists the gateway's sandboxes (none when it cannot be
// asked).
func sandboxNames(ctx context.Context, env *environment) []string {
	return askGateway(ctx, env, func(ctx context.Context, api *apiclient.Client) (*portcullisv1.ListSandboxesResponse, error) {
		return api.Sandbox.ListSandboxes(ctx, &portcullisv1.ListSandboxesRequest{})
	}, func(res *portcullisv1.ListSandboxesResponse) (names []string) {
		for _, s := range res.GetSandboxes() {
			names = append(names, s.GetName())
		}
		return names
	})
}

// pendingProposals lists the ids of pending proposals, each with its
// sandbox and rationale as the shell's description.
func pendingProposals(ctx context.Context, env *environment) []string {
	return askGateway(ctx, env, func(ctx context.Context, api *apiclient.Client) (*portcullisv1.ListProposalsResponse, error) {
		return api.Approval.ListProposals(ctx, &portcullisv1.ApprovalServiceListProposalsRequest{Status: "pending"})
	}, func(res *portcullisv1.ListProposalsResponse) (ids []string) {
		for _, p := range res.GetProposals() {
			ids = append(ids, strconv.FormatUint(p.GetId(), 10)+"\t"+p.GetSandbox()+": "+clip(p.GetRationale(), 60))
		}
		return ids
	})
}

// askGateway makes a completion's call within completionTimeout and
// lists what it answered (nothing when the gateway cannot be asked).
func askGateway[R any](ctx context.Context, env *environment, call func(context.Context, *apiclient.Client) (R, error), list func(R) []string) []string {
	api, err := env.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	res, err := call(ctx, api)
	if err != nil {
		return nil
	}
	return list(res)
}
