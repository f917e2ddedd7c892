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
	"github.com/portcullis-dev/portcullis/internal/clitree"
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
			clitree.HideFlags(c, clientFlags...)
		}
	}
	addCompletions(root, env)
	clitree.MarkStart(root, func() { env.started = true })
	return root
}

var (
	newGroupCmd = clitree.NewGroup
	args        = clitree.Args
	need        = clitree.Need
)

// clientFlags are the global flags of the commands that call a gateway's
// API; the servers and the commands on the database ignore them.
var clientFlags = []string{"gateway", "token", "token-file", "timeout", "output"}

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
