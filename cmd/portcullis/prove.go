//go:build !proxyonly

package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apitext"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/prover/offline"
)

// newProveCmd is `portcullis prove`: the prover on files, for CI.
func newProveCmd(env *environment) *cobra.Command {
	var current, proposed, boundary string
	var credentialed []string
	var devLoopback bool
	var budget int64
	cmd := &cobra.Command{
		Use:   "prove --current A --proposed B",
		Short: "Check offline what a policy change adds (exit 1 on any finding)",
		Long: `Compute exactly what the proposed policy allows that the current one
denies, and report it as findings: new reach, paths, HTTP methods, MCP
methods and tools (each with a concrete request as counterexample), new
reach to credentialed destinations, private networks, wildcards, what goes
beyond a boundary, widened argument schemas, weakened enforcement, and
cloud metadata addresses.

Exit 0: no findings. Exit 1: findings. Exit 2: an input could not be read
or is not a valid policy, or the change is too complex to prove within the
prover's budget of work (--budget; refused, never answered partially).
SIGINT and SIGTERM stop a proof at once. With -o json the output is always one JSON
object: {"findings": [...]}, plus "error" and "problems" when exiting 2.`,
		Example: `  portcullis prove --current main.yaml --proposed pr.yaml
  portcullis prove --current main.yaml --proposed pr.yaml --boundary boundary.yaml \
    --credentialed api.github.com:443 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			res, err := prove(cmd.Context(), env, current, proposed, boundary, credentialed, devLoopback, budget)
			if err != nil {
				if env.jsonOutput() {
					if werr := env.printValueJSON(res.Failed(err)); werr != nil {
						return werr
					}
				}
				return err
			}
			if env.jsonOutput() {
				if err := env.printValueJSON(res); err != nil {
					return err
				}
			} else {
				apitext.Findings(env.stdout, res.Findings)
			}
			return res.Err()
		},
	}
	cmd.Flags().StringVar(&current, "current", "", "the policy in force (`FILE`, YAML or JSON)")
	cmd.Flags().StringVar(&proposed, "proposed", "", "the proposed policy (`FILE`)")
	cmd.Flags().StringVar(&boundary, "boundary", "", "the most the sandbox may ever be granted (`FILE`); beyond it is exceeds_boundary")
	cmd.Flags().StringArrayVar(&credentialed, "credentialed", nil, "a destination whose requests carry injected credentials (`HOST:PORT`, the host as endpoints write it, `*.github.com` too; repeatable)")
	cmd.Flags().BoolVar(&devLoopback, "dev-allow-loopback", false, "prove as for a proxy run with --dev-allow-loopback (loopback upstreams reachable)")
	cmd.Flags().Int64Var(&budget, "budget", prover.DefaultBudget, "the work units the proof may spend (`N`; the gateway's is the default): raise it to prove policies of thousands of endpoints at once; memory stays bounded")
	return cmd
}

// prove reads the files and proves them (prover/offline).
func prove(ctx context.Context, env *environment, currentFile, proposedFile, boundaryFile string, credentialed []string, devLoopback bool, budget int64) (offline.Result, error) {
	res := offline.Result{Findings: []apitext.ProvedFinding{}}
	if currentFile == "" || proposedFile == "" {
		return res, usagef("prove needs --current FILE and --proposed FILE")
	}
	if budget <= 0 {
		return res, usagef("--budget must be a positive number of work units")
	}
	opts := prover.Options{DevAllowLoopback: devLoopback, Budget: budget}
	for _, hp := range credentialed {
		dest, err := prover.ParseHostPattern(hp)
		if err != nil {
			return res, usagef("--credentialed %v", err)
		}
		opts.Credentialed = append(opts.Credentialed, dest)
	}
	read := func(flag, file string) (offline.Document, error) {
		p, _, problems, err := env.readDocument(file)
		return offline.Document{Flag: flag, File: displayName(file), Policy: p, Problems: problems}, err
	}
	current, err := read("--current", currentFile)
	if err != nil {
		return res, err
	}
	var boundary *offline.Document
	if boundaryFile != "" {
		b, err := read("--boundary", boundaryFile)
		if err != nil {
			return res, err
		}
		boundary = &b
	}
	proposed, err := read("--proposed", proposedFile)
	if err != nil {
		return res, err
	}
	res, err = offline.Prove(ctx, current, proposed, boundary, opts)
	if isA[*offline.InputError](err) {
		err = inputErr(err) // exit 2
	}
	return res, err
}
