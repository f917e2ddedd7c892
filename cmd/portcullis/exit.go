package main

import (
	"fmt"

	"github.com/portcullis-dev/portcullis/internal/apitext"
	"github.com/portcullis-dev/portcullis/internal/cliexit"
	"github.com/portcullis-dev/portcullis/policy"
)

// Exit codes and the CLI's own errors are package cliexit's.
const (
	exitOK          = cliexit.OK
	exitNo          = cliexit.No
	exitInvalid     = cliexit.Invalid
	exitConflict    = cliexit.Conflict
	exitUnavailable = cliexit.Unavailable
)

var (
	exitCode = cliexit.Code
	usagef   = cliexit.Usagef
	asUsage  = cliexit.AsUsage
	inputErr = cliexit.Input
)

type problemsError = cliexit.ProblemsError

// isA reports whether err's chain holds a T.
func isA[T error](err error) bool { return cliexit.IsA[T](err) }

// reportError writes err to stderr (cliexit.Report).
func reportError(env *environment, err error) {
	cliexit.Report(env.stderr, err, cliexit.Reporting{CommandPath: env.commandPath,
		Gateway: env.gatewayForMessages(), HasToken: env.hasToken(), TokenEnv: envToken})
}

// formatProblem is "path: message", or the message alone.
var formatProblem = apitext.Problem

// printLocalProblems prints the policy package's problems.
func printLocalProblems(env *environment, prefix string, problems []policy.Problem) {
	for _, p := range problems {
		fmt.Fprintf(env.stderr, "%s%s\n", prefix, formatProblem(p.Path, p.Message))
	}
}
