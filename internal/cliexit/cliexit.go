// Package cliexit is how the command line ends: the exit code of every
// error (the contract DESIGN.md states: 0 success, 1 no, 2 invalid input or
// usage, 3 conflict, 4 gateway unavailable), the errors the CLI makes of
// its own (usage, unreadable input, a document with problems), and the
// error as a person reads it on stderr, with each problem the gateway
// sent at its field. cmd/portcullis calls it; nothing else decides an
// exit code.
package cliexit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	"github.com/portcullis-dev/portcullis/prover"
)

// Exit codes of the command-line contract (DESIGN.md).
const (
	OK          = 0 // success
	No          = 1 // the answer is no: not found, denied, unauthenticated (and anything unclassified)
	Invalid     = 2 // invalid input or usage
	Conflict    = 3 // conflict: stale expected version, already exists, precondition
	Unavailable = 4 // gateway unavailable: unreachable, timed out, overloaded, not a gateway at all
)

// Code maps an error to its exit code. It is the only place that does.
func Code(err error) int {
	var netErr net.Error
	switch {
	case err == nil:
		return OK
	case IsA[*UsageError](err), IsA[*InputError](err), IsA[*ProblemsError](err),
		errors.Is(err, prover.ErrTooComplex), IsA[*apiclient.RefusalError](err):
		// Refused input: prove on a change beyond the prover's budget,
		// and a proposal refused as not narrow, too.
		return Invalid
	case IsA[*apiclient.RateLimitError](err), IsA[*apitext.EnforcementError](err):
		// The gateway answered no. Too many proposals: for now; unlike
		// an overloaded gateway (ResourceExhausted alone, exit 4),
		// retrying at once will not help. --wait: a proxy refused the
		// version, or some did not apply it in time.
		return No
	case IsA[*apiclient.NotGatewayError](err):
		// A wrong address: no gateway is available there.
		return Unavailable
	}
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return apiclient.ExitCode(ce.Code())
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.As(err, &netErr):
		return Unavailable
	}
	return No
}

// IsA reports whether err's chain holds a T.
func IsA[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}

// UsageError is a command line that cannot be run as given (exit 2).
type UsageError struct{ err error }

func (e *UsageError) Error() string { return e.err.Error() }
func (e *UsageError) Unwrap() error { return e.err }

// Usagef is a UsageError saying what fmt.Sprintf would.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// AsUsage marks err as a usage error.
func AsUsage(err error) error {
	if IsA[*UsageError](err) {
		return err
	}
	return &UsageError{err}
}

// InputError is an input the command cannot read (a missing file; exit 2).
type InputError struct{ err error }

func (e *InputError) Error() string { return e.err.Error() }
func (e *InputError) Unwrap() error { return e.err }

// Input marks err as an InputError.
func Input(err error) error { return &InputError{err} }

// ProblemsError is a document that did not validate offline (exit 2).
// Its problems have already been printed.
type ProblemsError struct {
	File  string
	Count int
}

func (e *ProblemsError) Error() string {
	if e.Count == 1 {
		return e.File + ": 1 problem"
	}
	return fmt.Sprintf("%s: %d problems", e.File, e.Count)
}

// Reporting is what Report says besides the error: the command that
// failed, the gateway it called (redacted) and whether a token was given
// (and the variable that gives one).
type Reporting struct {
	CommandPath, Gateway string
	HasToken             bool
	TokenEnv             string
}

// Report writes err to w (the command's stderr) as "error: …", followed by the field
// paths of every validation problem the gateway sent. It never prints the
// token: the gateway URL is shown redacted and tokens are never part of an
// error.
func Report(w io.Writer, err error, r Reporting) {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		fmt.Fprintf(w, "error: %v\n", err)
		if IsA[*UsageError](err) {
			path := r.CommandPath
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
	case len(problems) == 1 && msg == apitext.Problem(problems[0].GetPath(), problems[0].GetMessage()):
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
			fmt.Fprintf(w, "error: gateway %s is unreachable: %s\n", r.Gateway, msg)
			break
		}
		fmt.Fprintf(w, "error: gateway %s unavailable: %s\n", r.Gateway, msg)
	case connect.CodeUnauthenticated:
		fmt.Fprintf(w, "error: %s\n", msg)
		if !r.HasToken {
			fmt.Fprintf(w, "no token given: use --token-file, --token or %s\n", r.TokenEnv)
		}
	default:
		fmt.Fprintf(w, "error: %s\n", msg)
	}
	for _, p := range problems {
		fmt.Fprintf(w, "  %s\n", apitext.Problem(p.GetPath(), p.GetMessage()))
	}
}
