package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// Exit codes of the command-line contract (DESIGN.md).
const (
	exitOK          = 0 // success
	exitNo          = 1 // the answer is no: not found, denied, unauthenticated (and anything unclassified)
	exitInvalid     = 2 // invalid input or usage
	exitConflict    = 3 // conflict: stale expected version, already exists, precondition
	exitUnavailable = 4 // gateway unavailable: unreachable, timed out, overloaded, not a gateway at all
)

// exitCode maps an error to its exit code. It is the only place that does.
func exitCode(err error) int {
	var netErr net.Error
	switch {
	case err == nil:
		return exitOK
	case isA[*usageError](err), isA[*inputError](err), isA[*problemsError](err),
		errors.Is(err, prover.ErrTooComplex), isA[*apiclient.RefusalError](err):
		// Refused input: prove on a change beyond the prover's budget,
		// and a proposal refused as not narrow, too.
		return exitInvalid
	case isA[*apiclient.RateLimitError](err), isA[*apitext.EnforcementError](err):
		// The gateway answered no. Too many proposals: for now; unlike
		// an overloaded gateway (ResourceExhausted alone, exit 4),
		// retrying at once will not help. --wait: a proxy refused the
		// version, or some did not apply it in time.
		return exitNo
	case isA[*apiclient.NotGatewayError](err):
		// A wrong address: no gateway is available there.
		return exitUnavailable
	}
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return apiclient.ExitCode(ce.Code())
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.As(err, &netErr):
		return exitUnavailable
	}
	return exitNo
}

// isA reports whether err's chain holds a T.
func isA[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}

// usageError is a command line that cannot be run as given.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// asUsage marks err as a usage error.
func asUsage(err error) error {
	if isA[*usageError](err) {
		return err
	}
	return &usageError{err}
}

// inputError is an input the command cannot read (a missing file).
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

func inputErr(err error) error { return &inputError{err} }

// problemsError is a document that did not validate offline. Its problems
// have already been printed.
type problemsError struct {
	file  string
	count int
}

func (e *problemsError) Error() string {
	if e.count == 1 {
		return e.file + ": 1 problem"
	}
	return fmt.Sprintf("%s: %d problems", e.file, e.count)
}

// reportError writes err to stderr as "error: …", followed by the field
// paths of every validation problem the gateway sent. It never prints the
// token: the gateway URL is shown redacted and tokens are never part of an
// error.
func reportError(env *environment, err error) {
	w := env.stderr
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		fmt.Fprintf(w, "error: %v\n", err)
		if isA[*usageError](err) {
			path := env.commandPath
			if path == "" {
				path = "portcullis"
			}
			fmt.Fprintf(w, "Run '%s --help' for usage.\n", path)
		}
		return
	}
	msg := ce.Message()
	if msg == "" {
		msg = ce.Code().String()
	}
	problems := apiclient.Problems(ce)
	switch {
	case len(problems) == 1 && msg == formatProblem(problems[0].GetPath(), problems[0].GetMessage()):
		// One field error: the message says it all.
		problems = nil
	case len(problems) > 0:
		// The message lists the problems too (for clients without
		// details); print them once, one per line, under its lead-in.
		if lead, _, found := strings.Cut(msg, ": "); found {
			msg = lead + ":"
		}
	}
	var netErr net.Error
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		if errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) {
			// No answer at all: nothing listens there, or the way is cut.
			fmt.Fprintf(w, "error: gateway %s is unreachable: %s\n", env.gatewayForMessages(), msg)
			break
		}
		fmt.Fprintf(w, "error: gateway %s unavailable: %s\n", env.gatewayForMessages(), msg)
	case connect.CodeUnauthenticated:
		fmt.Fprintf(w, "error: %s\n", msg)
		if !env.hasToken() {
			fmt.Fprintf(w, "no token given: use --token-file, --token or %s\n", envToken)
		}
	default:
		fmt.Fprintf(w, "error: %s\n", msg)
	}
	for _, p := range problems {
		fmt.Fprintf(w, "  %s\n", formatProblem(p.GetPath(), p.GetMessage()))
	}
}

// formatProblem is "path: message", or the message alone.
var formatProblem = apitext.Problem

// localProblems adapts the policy package's problems for printing.
func printLocalProblems(env *environment, prefix string, problems []policy.Problem) {
	for _, p := range problems {
		fmt.Fprintf(env.stderr, "%s%s\n", prefix, formatProblem(p.Path, p.Message))
	}
}
