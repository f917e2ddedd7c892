package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayDecisionFlags: the decision-record bounds are documented in
// the gateway's help, and values the gateway would read as "the default"
// (or cannot use) are usage errors before any store is opened.
func TestGatewayDecisionFlags(t *testing.T) {
	help, _, code := runCLI(t, "gateway", "--help")
	for _, flag := range []string{"--decision-max-age", "--decision-max-per-sandbox", "--decision-rate", "--decision-burst"} {
		if code != 0 || !strings.Contains(help, flag) {
			t.Errorf("gateway --help (exit %d) does not document %s", code, flag)
		}
	}
	for _, args := range [][]string{
		{"--decision-max-age", "0"},
		{"--decision-max-per-sandbox", "0"},
		{"--decision-rate", "0"},
		{"--decision-rate", "NaN"},
		{"--decision-rate", "+Inf"},
		{"--decision-burst", "9"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		_, stderr, code := runCLI(t, append([]string{"gateway", "--data-dir", dir, "--listen", "127.0.0.1:0"}, args...)...)
		if code != exitInvalid || !strings.Contains(stderr, args[0]) {
			t.Errorf("gateway %v: exit %d, stderr %q; want a usage error naming the flag", args, code, stderr)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("gateway %v created its data dir before refusing", args)
		}
	}
}

// TestGatewaySentryFlags: the Sentry flags are documented, and 0 (which
// the gateway would read as "the default") is a usage error before any
// store is opened.
func TestGatewaySentryFlags(t *testing.T) {
	help, _, code := runCLI(t, "gateway", "--help")
	for _, flag := range []string{"--sentry-dry-run", "--quarantine-budget", "--quarantine-budget-per-source", "--sentry-retention", "--sentry-database-url"} {
		if code != 0 || !strings.Contains(help, flag) {
			t.Errorf("gateway --help (exit %d) does not document %s", code, flag)
		}
	}
	for _, want := range []string{"(default 10)", "(default 3)", "(default 720h0m0s)"} {
		if !strings.Contains(help, want) {
			t.Errorf("gateway --help lacks %s", want)
		}
	}
	for _, args := range [][]string{
		{"--quarantine-budget", "0"},
		{"--sentry-retention", "0"},
		{"--sentry-retention", "0s"},
		{"--quarantine-budget", "ten"},
		{"--quarantine-budget-per-source", "0"},
		{"--sentry-database-url", "sqlite:///tmp/events.db"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		_, stderr, code := runCLI(t, append([]string{"gateway", "--data-dir", dir, "--listen", "127.0.0.1:0"}, args...)...)
		if code != exitInvalid || !strings.Contains(stderr, args[0]) {
			t.Errorf("gateway %v: exit %d, stderr %q; want a usage error naming the flag", args, code, stderr)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("gateway %v created its data dir before refusing", args)
		}
	}
}
