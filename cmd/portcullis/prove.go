package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apitext"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
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
					res.Error = err.Error()
					if pe, ok := errors.AsType[*proveInputError](err); ok {
						res.Problems = pe.problems
					}
					if werr := env.printValueJSON(res); werr != nil {
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
			if n := len(res.Findings); n > 0 {
				return &findingsError{count: n}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&current, "current", "", "the policy in force (`FILE`, YAML or JSON)")
	cmd.Flags().StringVar(&proposed, "proposed", "", "the proposed policy (`FILE`)")
	cmd.Flags().StringVar(&boundary, "boundary", "", "the most the sandbox may ever be granted (`FILE`); beyond it is exceeds_boundary")
	cmd.Flags().StringArrayVar(&credentialed, "credentialed", nil, "a destination whose requests carry injected credentials (`HOST:PORT`, repeatable)")
	cmd.Flags().BoolVar(&devLoopback, "dev-allow-loopback", false, "prove as for a proxy run with --dev-allow-loopback (loopback upstreams reachable)")
	cmd.Flags().Int64Var(&budget, "budget", prover.DefaultBudget, "the work units the proof may spend (`N`; the gateway's is the default): raise it to prove policies of thousands of endpoints at once; memory stays bounded")
	return cmd
}

// proveResult is prove -o json.
type proveResult struct {
	Findings []apitext.ProvedFinding `json:"findings"`
	Error    string                  `json:"error,omitempty"`
	Problems []inputProblems         `json:"problems,omitempty"`
}

// inputProblems are the problems of one input file.
type inputProblems struct {
	File     string           `json:"file"`
	Problems []policy.Problem `json:"problems"`
}

// proveInputError: an input is not a valid policy (exit 2).
type proveInputError struct {
	msg      string
	problems []inputProblems
}

func (e *proveInputError) Error() string { return e.msg }

// findingsError: the prover found something (exit 1); the findings were
// printed.
type findingsError struct{ count int }

func (e *findingsError) Error() string {
	if e.count == 1 {
		return "the proposed policy adds 1 finding"
	}
	return fmt.Sprintf("the proposed policy adds %d findings", e.count)
}

func prove(ctx context.Context, env *environment, currentFile, proposedFile, boundaryFile string, credentialed []string, devLoopback bool, budget int64) (proveResult, error) {
	res := proveResult{Findings: []apitext.ProvedFinding{}}
	if currentFile == "" || proposedFile == "" {
		return res, usagef("prove needs --current FILE and --proposed FILE")
	}
	if budget <= 0 {
		return res, usagef("--budget must be a positive number of work units")
	}
	opts := prover.Options{DevAllowLoopback: devLoopback, Budget: budget}
	for _, hp := range credentialed {
		dest, err := prover.ParseHostPort(hp)
		if err != nil {
			return res, usagef("--credentialed %v", err)
		}
		opts.Credentialed = append(opts.Credentialed, dest)
	}
	// valid reads a policy file, given with flag, that must be valid.
	valid := func(flag, file string) (*policy.Policy, error) {
		p, _, problems, err := env.readDocument(file)
		if err == nil && len(problems) > 0 {
			err = &proveInputError{msg: fmt.Sprintf("%s %s is not a valid policy: %s", flag, displayName(file), summarizeProblems(problems)), problems: []inputProblems{{displayName(file), problems}}}
		}
		return p, err
	}
	current, err := valid("--current", currentFile)
	if err != nil {
		return res, err
	}
	if boundaryFile != "" {
		if opts.Boundary, err = valid("--boundary", boundaryFile); err != nil {
			return res, err
		}
	}
	proposed, _, problems, err := env.readDocument(proposedFile)
	if err != nil {
		return res, err
	}
	if len(problems) > 0 {
		// A proposed policy naming a cloud metadata address is invalid
		// (the gateway refuses it), and that is a finding, not an error.
		var metadata, other []policy.Problem
		for _, p := range problems {
			if p.Code == policy.CodeCloudMetadata {
				metadata = append(metadata, p)
			} else {
				other = append(other, p)
			}
		}
		if len(other) > 0 {
			return res, &proveInputError{msg: fmt.Sprintf("--proposed %s is not a valid policy: %s", displayName(proposedFile), summarizeProblems(other)), problems: []inputProblems{{displayName(proposedFile), problems}}}
		}
		for _, p := range metadata {
			res.Findings = append(res.Findings, apitext.ProvedFinding{Kind: prover.CloudMetadata, Rule: p.Path, Detail: p.Message})
		}
		return res, nil
	}
	report, err := prover.Prove(ctx, current, proposed, opts)
	if err != nil {
		return res, err
	}
	for _, f := range report.Findings {
		res.Findings = append(res.Findings, apitext.FindingOf(f))
	}
	return res, nil
}

func summarizeProblems(ps []policy.Problem) string {
	if len(ps) == 1 {
		return ps[0].String()
	}
	return fmt.Sprintf("%s (and %d more)", ps[0].String(), len(ps)-1)
}
