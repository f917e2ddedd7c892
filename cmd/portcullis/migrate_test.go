package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// migrate says which migrations it applied, and that there was nothing to
// apply when the schema was current.
func TestMigrateSaysWhatRan(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := runCLI(t, "migrate", "--data-dir", dir)
	ok(t, code, stderr)
	entries, err := os.ReadDir(filepath.Join("..", "..", "migrations", "sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^applied (\d+) migration\(s\) \(00001, .*\): `).FindStringSubmatch(stdout)
	if m == nil || m[1] != strconv.Itoa(len(entries)) {
		t.Fatalf("first migrate: %q; want every one of the %d migrations named", stdout, len(entries))
	}
	stdout, stderr, code = runCLI(t, "migrate", "--data-dir", dir)
	ok(t, code, stderr)
	if !strings.HasPrefix(stdout, "the schema is current; nothing to apply: ") {
		t.Fatalf("second migrate: %q; want nothing applied", stdout)
	}
}
