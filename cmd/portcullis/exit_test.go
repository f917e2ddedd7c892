package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func TestExitCode(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, exitOK},
		{"usage", usagef("bad flag"), exitInvalid},
		{"wrapped usage", fmt.Errorf("x: %w", usagef("bad flag")), exitInvalid},
		{"unreadable file", inputErr(os.ErrNotExist), exitInvalid},
		{"offline problems", &problemsError{File: "p.yaml", Count: 2}, exitInvalid},
		{"not found", connect.NewError(connect.CodeNotFound, "no sandbox"), exitNo},
		{"permission denied", connect.NewError(connect.CodePermissionDenied, "operator"), exitNo},
		{"unauthenticated", connect.NewError(connect.CodeUnauthenticated, "no token"), exitNo},
		{"invalid argument", connect.NewError(connect.CodeInvalidArgument, "bad policy"), exitInvalid},
		{"out of range", connect.NewError(connect.CodeOutOfRange, "version"), exitInvalid},
		{"aborted", connect.NewError(connect.CodeAborted, "stale version"), exitConflict},
		{"failed precondition", connect.NewError(connect.CodeFailedPrecondition, "static section"), exitConflict},
		{"already exists", connect.NewError(connect.CodeAlreadyExists, "sandbox exists"), exitConflict},
		{"unavailable", connect.NewError(connect.CodeUnavailable, "down"), exitUnavailable},
		{"deadline exceeded", connect.NewError(connect.CodeDeadlineExceeded, "slow"), exitUnavailable},
		{"resource exhausted", connect.NewError(connect.CodeResourceExhausted, "busy"), exitUnavailable},
		{"proposal refused", &apiclient.RefusalError{Refusals: []*portcullisv1.ProposalRefusal{{Operation: 0, Field: "host", Rule: "public_suffix"}}}, exitInvalid},
		{"proposal rate limited", &apiclient.RateLimitError{RetryAfterSeconds: 30}, exitNo},
		{"a proxy refused the version", &apitext.EnforcementError{Enforcement: &portcullisv1.Enforcement{Version: 3, Nacked: 1, Total: 2}}, exitNo},
		{"proxies pending at --wait-timeout", &apitext.EnforcementError{Enforcement: &portcullisv1.Enforcement{Version: 3, Pending: 1, Total: 2}, Timeout: time.Second}, exitNo},
		{"wrapped connect error", fmt.Errorf("set policy: %w", connect.NewError(connect.CodeAborted, "stale")), exitConflict},
		{"internal", connect.NewError(connect.CodeInternal, "internal error"), exitNo},
		{"unimplemented", connect.NewError(connect.CodeUnimplemented, "old gateway"), exitNo},
		{"context deadline", context.DeadlineExceeded, exitUnavailable},
		{"connection refused", refused, exitUnavailable},
		{"unclassified", errors.New("something else"), exitNo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitCode(tt.err); got != tt.want {
				t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

// TestUsageErrors runs command lines cobra or the commands refuse.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"sandbox", "bogus"}, `unknown command "bogus" for "portcullis sandbox"`},
		{[]string{"sandbox", "list", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"sandbox", "create"}, "needs NAME"},
		{[]string{"sandbox", "get", "a", "b"}, `unexpected argument "b"`},
		{[]string{"sandbox", "list", "-o", "yaml"}, "cannot print yaml"},
		{[]string{"sandbox", "list", "-o", "xml"}, `unknown output format "xml"`},
		{[]string{"policy", "set", "orders"}, "needs --file"},
		{[]string{"policy", "set", "orders", "-f", "testdata/quickstart.yaml", "--expect-version", "-1"}, "--expect-version must be a version number (0 or more)"},
		{[]string{"policy", "set", "orders", "-f", "testdata/quickstart.yaml", "--expect-version", "two"}, "invalid argument"},
		{[]string{"policy", "rollback", "orders"}, "needs --to"},
		{[]string{"policy", "rollback", "orders", "--to", "1", "--wait-timeout", "5s"}, "--wait-timeout needs --wait"},
		{[]string{"sandbox", "freeze", "orders", "--reason", "r", "--wait", "--wait-timeout", "-1s"}, "--wait-timeout must be positive"},
		{[]string{"proposals", "approve", "1", "--reason", "r", "--wait-timeout", "1m"}, "--wait-timeout needs --wait"},
		{[]string{"policy", "diff", "orders", "1", "x"}, "B must be a version number"},
		{[]string{"token", "create", "--name", "alice"}, "needs --role"},
		{[]string{"token", "create", "--name", "alice", "--role", "sandbox"}, "--role must be admin, operator or sentry"},
		{[]string{"policy", "validate", "testdata/does-not-exist.yaml"}, "no such file"},
		{[]string{"sandbox", "list", "--gateway", "127.0.0.1:7070"}, "not an http:// or https:// URL"},
		{[]string{"sandbox", "list", "--token", "a", "--token-file", "f"}, "not both"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tt.args...)
			if code != exitInvalid {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitInvalid, stderr)
			}
			if !strings.Contains(stderr, "error: ") || !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr does not say %q:\n%s", tt.wantStderr, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout not empty:\n%s", stdout)
			}
		})
	}
}

// TestHelp checks that every client command documents itself.
func TestHelp(t *testing.T) {
	root := newRootCmd(newEnvironment(nil, nil, nil, nil))
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch c.Name() {
		case "help", "completion", "gateway", "migrate": // cobra's, or owned by serve.go
			return
		}
		if c.Short == "" || c.Example == "" {
			t.Errorf("%s: Short and Example must be set", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)

	stdout, _, code := runCLI(t, "policy", "set", "--help")
	if code != exitOK || !strings.Contains(stdout, "--expect-version") || !strings.Contains(stdout, "Examples:") {
		t.Errorf("policy set --help: code %d\n%s", code, stdout)
	}
}
