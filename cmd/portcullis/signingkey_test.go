package main

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/internal/signing"
)

// signing-key list creates the first key once; rotate appends a key
// and keeps the chain's start.
func TestSigningKeyCommands(t *testing.T) {
	dir := t.TempDir()
	list := func() []string {
		t.Helper()
		stdout, stderr, code := runCLI(t, "signing-key", "list", "--data-dir", dir)
		ok(t, code, stderr)
		return strings.Fields(stdout)
	}
	first := list()
	if len(first) != 1 {
		t.Fatalf("first list: %q", first)
	}
	if _, err := signing.ParsePublicKey(first[0]); err != nil {
		t.Fatalf("listed key %q: %v", first[0], err)
	}
	if again := list(); len(again) != 1 || again[0] != first[0] {
		t.Fatalf("a second list changed the chain: %q", again)
	}
	stdout, stderr, code := runCLI(t, "signing-key", "rotate", "--data-dir", dir)
	ok(t, code, stderr)
	after := list()
	if len(after) != 2 || after[0] != first[0] || !strings.Contains(stdout, after[1]) {
		t.Fatalf("after rotate: chain %q, output %q", after, stdout)
	}
	if _, _, code := runCLI(t, "signing-key", "rotate", "extra-arg", "--data-dir", dir); code != exitInvalid {
		t.Fatalf("an extra argument: exit %d, want %d", code, exitInvalid)
	}
}
