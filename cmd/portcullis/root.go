package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/cliconfig"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
)

// newRootCmd builds the command tree.
func newRootCmd(env *environment) *cobra.Command {
	root := &cobra.Command{
		Use:               "portcullis",
		Short:             "Policy control plane for AI-agent sandboxes",
		Long:              rootLong,
		Example:           rootExample,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return env.checkOutput(cmd) },
	}
	env.addGlobalFlags(root)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return asUsage(err) })
	root.AddCommand(commands(env)...)
	cliconfig.Add(root, configFile, env.getenv)
	for _, c := range root.Commands() {
		switch c.Name() {
		case "gateway", "demo", "migrate", "healthcheck", "run":
			hideClientFlags(c)
		}
	}
	addCompletions(root, env)
	markStart(root, env)
	return root
}

// markStart wraps every command's run function so that env.started tells
// whether an error came from the command itself or from cobra refusing the
// command line before it ran.
func markStart(cmd *cobra.Command, env *environment) {
	for _, c := range cmd.Commands() {
		markStart(c, env)
	}
	if runE := cmd.RunE; runE != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error {
			env.started = true
			return runE(c, args)
		}
	}
	if run := cmd.Run; run != nil {
		cmd.Run = func(c *cobra.Command, args []string) {
			env.started = true
			run(c, args)
		}
	}
}

// newGroupCmd is a command that only holds subcommands: alone it prints its
// help; with an unknown subcommand it is a usage error.
func newGroupCmd(use, short, example string) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		// A mistyped subcommand comes here with its arguments and flags
		// ("policy st x -f y"): flags no group has must not hide the
		// real mistake behind "unknown shorthand flag".
		Args:               cobra.ArbitraryArgs,
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return cmd.Help()
		},
	}
}

// unknownCommand is the usage error for a subcommand name of group that
// does not exist, suggesting the nearest ones.
func unknownCommand(group *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, group.CommandPath())
	if group.SuggestionsMinimumDistance <= 0 {
		group.SuggestionsMinimumDistance = 2
	}
	if s := group.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + orList(s) + "?"
	}
	return usagef("%s", msg)
}

// orList is "a", "a or b", "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// clientFlags are the global flags of the commands that call a gateway's
// API; the servers and the commands on the database ignore them.
var clientFlags = []string{"gateway", "token", "token-file", "timeout", "output"}

// hideClientFlags leaves the client flags out of cmd's help (and its
// subcommands'): the gateway does not take --gateway or --token.
func hideClientFlags(cmd *cobra.Command) {
	help := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		for _, name := range clientFlags {
			if f := c.Root().PersistentFlags().Lookup(name); f != nil {
				f.Hidden = true
			}
		}
		help(c, args)
	})
}

// args checks the positional arguments against their names.
func args(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		switch {
		case len(got) < len(names):
			return usagef("%s needs %s", cmd.CommandPath(), strings.Join(names[len(got):], " "))
		case len(got) > len(names):
			return usagef("%s: unexpected argument %q", cmd.CommandPath(), got[len(names)])
		}
		for i, a := range got {
			if strings.TrimSpace(a) == "" {
				return usagef("%s: %s is empty", cmd.CommandPath(), names[i])
			}
		}
		return nil
	}
}

// need is the usage error for a missing required flag.
func need(cmd *cobra.Command, flag string) error {
	return usagef("%s needs --%s", cmd.CommandPath(), flag)
}

// reasonCmd is a command that takes one argument and a --reason and
// makes one call, printing one line about the answer: sandbox freeze and
// unfreeze, proposals reject and withdraw. A is the parsed argument, R
// the answer.
type reasonCmd[A any, R proto.Message] struct {
	use, short, long, example string
	arg                       string                  // the argument's name, e.g. "NAME"
	parse                     func(string) (A, error) // a usage error for an argument that cannot be right
	reasonHelp                string
	needReason                bool // --reason is required
	call                      func(ctx context.Context, api *apiclient.Client, arg A, reason string) (R, error)
	done                      func(R) string // the line printed without -o json
	// committed, if set, names the version the call committed: the
	// command then takes --wait (wait.go).
	committed func(R) (sandbox string, version uint32)
}

func newReasonCmd[A any, R proto.Message](env *environment, c reasonCmd[A, R]) *cobra.Command {
	var reason string
	var wait waitFlags
	cmd := &cobra.Command{
		Use:     c.use,
		Short:   c.short,
		Long:    c.long,
		Example: c.example,
		Args:    args(c.arg),
		RunE: func(cmd *cobra.Command, a []string) error {
			arg, err := c.parse(a[0])
			if err != nil {
				return err
			}
			if c.needReason && strings.TrimSpace(reason) == "" {
				return need(cmd, "reason")
			}
			call := func(api *apiclient.Client) (R, error) { return c.call(cmd.Context(), api, arg, reason) }
			done := func(res R) error {
				_, err := fmt.Fprintln(env.stdout, c.done(res))
				return err
			}
			if c.committed == nil {
				return unary(env, call, done)
			}
			if err := wait.check(cmd); err != nil {
				return err
			}
			return unaryWait(cmd.Context(), env, &wait, call, c.committed, done)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", c.reasonHelp)
	if c.committed != nil {
		addWaitFlags(cmd, &wait)
	}
	return cmd
}

// optionalVersion returns the value of a version flag when given, nil
// when not, and a usage error for a value out of range.
func optionalVersion(cmd *cobra.Command, name string, v int64) (*uint32, error) {
	if !cmd.Flags().Changed(name) {
		return nil, nil
	}
	n, err := flagVersion(name, v)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// flagVersion checks a version flag's value (0 or more).
func flagVersion(name string, v int64) (uint32, error) {
	if v < 0 || v > math.MaxUint32 {
		return 0, usagef("--%s must be a version number (0 or more), got %d", name, v)
	}
	return uint32(v), nil
}

// parseVersion parses a positional version number (1 or more).
func parseVersion(name, s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v < 1 || strconv.FormatUint(v, 10) != s {
		return 0, usagef("%s must be a version number (1 or more), got %q", name, s)
	}
	return uint32(v), nil
}

// timeFlag is a time flag's value, its error a usage error.
func timeFlag(t time.Time, err error) (time.Time, error) {
	if err != nil {
		return t, asUsage(err)
	}
	return t, nil
}
