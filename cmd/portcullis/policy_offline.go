package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/policy"
)

// The offline commands read a document with the same parser the gateway
// uses; they need neither a gateway nor a token.

func newPolicyValidateCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a policy document offline: every problem with its field path",
		Long: `Check FILE (YAML or JSON; - reads stdin) without a gateway. Every problem is
printed to stderr as "path: message", and every place where OpenShell would
read the document differently as a warning. Exit 2 if there is any problem.
-o json prints {valid, problems, warnings, hash} to stdout in every case.`,
		Example: `  portcullis policy validate policy.yaml
  portcullis policy validate policy.yaml -o json | jq .hash`,
		Args: args("FILE"),
		RunE: func(cmd *cobra.Command, a []string) error {
			p, warnings, problems, err := env.readDocument(a[0])
			if err != nil {
				return err
			}
			res := validateResult{
				Valid:    len(problems) == 0,
				Problems: nonNil(problems),
				Warnings: nonNil(warnings),
			}
			if p != nil && len(problems) == 0 {
				res.Hash = p.Hash()
			}
			if env.jsonOutput() {
				if err := env.printValueJSON(res); err != nil {
					return err
				}
			} else {
				printLocalProblems(env, "warning: ", warnings)
				printLocalProblems(env, "", problems)
			}
			if len(problems) > 0 {
				return &problemsError{File: displayName(a[0]), Count: len(problems)}
			}
			if !env.jsonOutput() {
				fmt.Fprintf(env.stdout, "%s: valid (%s)\n", displayName(a[0]), hashLabel(res.Hash))
			}
			return nil
		},
	}
}

func newPolicyFmtCmd(env *environment) *cobra.Command {
	return &cobra.Command{
		Use:   "fmt FILE",
		Short: "Print a policy document in canonical YAML (offline)",
		Long: `Print FILE (YAML or JSON; - reads stdin) in canonical form: the YAML the
gateway hashes and policy get -o yaml prints (-o json: the canonical JSON).
Comments are not kept. A document with problems is not printed; its
problems go to stderr (exit 2).`,
		Example: `  portcullis policy fmt policy.json > policy.yaml
  portcullis policy fmt - < policy.yaml`,
		Args: args("FILE"),
		RunE: func(cmd *cobra.Command, a []string) error {
			p, _, problems, err := env.readDocument(a[0])
			if err != nil {
				return err
			}
			if len(problems) > 0 {
				printLocalProblems(env, "", problems)
				return &problemsError{File: displayName(a[0]), Count: len(problems)}
			}
			encode := policy.EncodeYAML
			if env.jsonOutput() {
				encode = policy.EncodeJSON
			}
			out, err := encode(p)
			if err != nil {
				return fmt.Errorf("encode %s: %w", displayName(a[0]), err)
			}
			_, err = env.stdout.Write(out)
			return err
		},
	}
}

// readDocument reads a policy document from path (- is stdin), then
// parses and validates it. Any parse error becomes a problem, so a caller
// has one list to print; err is only for a file that cannot be read.
func (e *environment) readDocument(path string) (p *policy.Policy, warnings, problems []policy.Problem, err error) {
	data, err := e.readInput(path)
	if err != nil {
		return nil, nil, nil, err
	}
	p, warnings, perr := policy.Parse(data)
	if perr == nil {
		return p, warnings, nil, nil
	}
	if ve, ok := errors.AsType[*policy.ValidationError](perr); ok && len(ve.Problems) > 0 {
		return p, warnings, ve.Problems, nil
	}
	return p, warnings, []policy.Problem{{Message: perr.Error()}}, nil
}

// validateResult is policy validate -o json: the fields of the API's
// ValidatePolicyResponse, with valid, problems and warnings always present.
type validateResult struct {
	Valid    bool             `json:"valid"`
	Problems []policy.Problem `json:"problems"`
	Warnings []policy.Problem `json:"warnings"`
	Hash     string           `json:"hash,omitempty"`
}

func nonNil(ps []policy.Problem) []policy.Problem {
	if ps == nil {
		return []policy.Problem{}
	}
	return ps
}

func displayName(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}
