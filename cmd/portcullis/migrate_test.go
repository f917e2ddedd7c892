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
	if stderr != "" {
		t.Errorf("migrate logged beside its output: %q", stderr)
	}
}

// The commands that open the store, run once and say what they did log
// nothing at info beside their output, and text when asked to.
func TestOfflineCommandsLogQuietly(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"migrate"}, {"signing-key", "rotate"}, {"signing-key", "list"}} {
		stdout, stderr, code := runCLI(t, append(args, "--data-dir", dir)...)
		ok(t, code, stderr)
		if stdout == "" || stderr != "" {
			t.Errorf("%s: stdout %q, stderr %q; want its output alone", strings.Join(args, " "), stdout, stderr)
		}
	}
	_, stderr, code := runCLIWith(t, cliInput{env: map[string]string{"PORTCULLIS_LOG_LEVEL": "info"}}, "signing-key", "rotate", "--data-dir", dir)
	ok(t, code, stderr)
	if !strings.Contains(stderr, `level=INFO msg="store open"`) || strings.Contains(stderr, `{"time"`) {
		t.Errorf("at info: stderr %q; want text lines", stderr)
	}
}
