// Package clitree is the shape every command of the CLI shares: groups
// that only hold subcommands (a mistyped one suggested), positional
// arguments checked against their names, a missing flag named, flags
// hidden from a command's help, and the mark that tells an error of the
// command's own code from cobra refusing the command line.
package clitree

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/cliexit"
)

// MarkStart wraps the run function of cmd and every command below it so
// that started is called when the command's own code begins: an error
// before it is cobra refusing the command line (a usage error).
func MarkStart(cmd *cobra.Command, started func()) {
	for _, c := range cmd.Commands() {
		MarkStart(c, started)
	}
	if runE := cmd.RunE; runE != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error {
			started()
			return runE(c, args)
		}
	}
	if run := cmd.Run; run != nil {
		cmd.Run = func(c *cobra.Command, args []string) {
			started()
			run(c, args)
		}
	}
}

// NewGroup is a command that only holds subcommands: alone it prints its
// help; with an unknown subcommand it is a usage error.
func NewGroup(use, short, example string) *cobra.Command {
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
	return cliexit.Usagef("%s", msg)
}

// orList is "a", "a or b", "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// HideFlags leaves the root's persistent flags named out of cmd's help
// (and its subcommands'): the gateway does not take --gateway or --token.
func HideFlags(cmd *cobra.Command, names ...string) {
	help := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		for _, name := range names {
			if f := c.Root().PersistentFlags().Lookup(name); f != nil {
				f.Hidden = true
			}
		}
		help(c, args)
	})
}

// Args checks the positional arguments against their names.
func Args(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		switch {
		case len(got) < len(names):
			return cliexit.Usagef("%s needs %s", cmd.CommandPath(), strings.Join(names[len(got):], " "))
		case len(got) > len(names):
			return cliexit.Usagef("%s: unexpected argument %q", cmd.CommandPath(), got[len(names)])
		}
		for i, a := range got {
			if strings.TrimSpace(a) == "" {
				return cliexit.Usagef("%s: %s is empty", cmd.CommandPath(), names[i])
			}
		}
		return nil
	}
}

// Need is the usage error for a missing required flag.
func Need(cmd *cobra.Command, flag string) error {
	return cliexit.Usagef("%s needs --%s", cmd.CommandPath(), flag)
}
