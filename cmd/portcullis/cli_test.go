package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// runCLI runs the real program in-process, as main does, with no stdin and
// an empty environment (so a developer's PORTCULLIS_* variables never leak
// into a test). Point it at a gateway with "--gateway", URL, "--token", T.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLIWith(t, cliInput{}, args...)
}

// cliInput is what runCLIWith feeds the program besides its arguments.
type cliInput struct {
	stdin string
	env   map[string]string // the whole environment the program sees
}

// runCLIWith is runCLI with stdin and environment variables.
func runCLIWith(t *testing.T, in cliInput, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, strings.NewReader(in.stdin), &out, &errOut, func(k string) string { return in.env[k] })
	return out.String(), errOut.String(), code
}

func mustTime(s string) time.Time {
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return ts
}
