package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// validFiles are copies of OpenShell policies from reference/openshell-policies.
var validFiles = []string{"testdata/quickstart.yaml", "testdata/governance-interceptor.yaml"}

func TestPolicyValidateValid(t *testing.T) {
	for _, file := range validFiles {
		t.Run(file, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, "policy", "validate", file)
			if code != exitOK {
				t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stdout, "valid (sha256 ") {
				t.Errorf("stdout:\n%s", stdout)
			}
			if strings.Contains(stderr, "error:") {
				t.Errorf("stderr has an error:\n%s", stderr)
			}
		})
	}
}

func TestPolicyValidateInvalid(t *testing.T) {
	stdout, stderr, code := runCLI(t, "policy", "validate", "testdata/invalid.yaml")
	if code != exitInvalid {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitInvalid, stderr)
	}
	for _, path := range []string{
		"network_policies.github_api.endpoints[0].hots: ", // unknown field
		"network_policies.github_api.endpoints[0].port: ", // out of range
	} {
		if !strings.Contains(stderr, path) {
			t.Errorf("stderr does not name %q:\n%s", path, stderr)
		}
	}
	if !strings.Contains(stderr, "error: testdata/invalid.yaml: 2 problems") {
		t.Errorf("stderr has no summary:\n%s", stderr)
	}
	if stdout != "" {
		t.Errorf("stdout not empty:\n%s", stdout)
	}
}

func TestPolicyValidateJSON(t *testing.T) {
	type result struct {
		Valid    *bool            `json:"valid"`
		Problems []policy.Problem `json:"problems"`
		Warnings []policy.Problem `json:"warnings"`
		Hash     string           `json:"hash"`
	}
	decode := func(t *testing.T, s string) result {
		t.Helper()
		var r result
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, s)
		}
		if r.Valid == nil {
			t.Fatalf("stdout has no valid field:\n%s", s)
		}
		return r
	}

	stdout, stderr, code := runCLI(t, "policy", "validate", "-o", "json", "testdata/quickstart.yaml")
	if code != exitOK {
		t.Fatalf("valid file: exit code %d; stderr:\n%s", code, stderr)
	}
	r := decode(t, stdout)
	if !*r.Valid || len(r.Problems) != 0 || len(r.Hash) != 64 {
		t.Errorf("valid file: %+v", r)
	}

	stdout, stderr, code = runCLI(t, "policy", "validate", "-o", "json", "testdata/invalid.yaml")
	if code != exitInvalid {
		t.Fatalf("invalid file: exit code %d; stderr:\n%s", code, stderr)
	}
	r = decode(t, stdout)
	if *r.Valid || len(r.Problems) != 2 || r.Hash != "" {
		t.Errorf("invalid file: %+v", r)
	}
}

func TestPolicyValidateStdin(t *testing.T) {
	doc, err := os.ReadFile("testdata/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLIWith(t, cliInput{stdin: string(doc)}, "policy", "validate", "-")
	if code != exitOK || !strings.HasPrefix(stdout, "stdin: valid") {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestPolicyFmt checks that fmt prints a document with the same hash, that
// fmt is idempotent, and that a document with problems prints nothing.
func TestPolicyFmt(t *testing.T) {
	for _, file := range validFiles {
		t.Run(file, func(t *testing.T) {
			orig, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			stdout, stderr, code := runCLI(t, "policy", "fmt", file)
			if code != exitOK {
				t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
			}
			if got, want := mustHash(t, []byte(stdout)), mustHash(t, orig); got != want {
				t.Errorf("formatted hash %s, original %s", got, want)
			}
			again, _, code := runCLIWith(t, cliInput{stdin: stdout}, "policy", "fmt", "-")
			if code != exitOK || again != stdout {
				t.Errorf("fmt is not idempotent (code %d):\n%s\n---\n%s", code, stdout, again)
			}
		})
	}

	stdout, stderr, code := runCLI(t, "policy", "fmt", "testdata/invalid.yaml")
	if code != exitInvalid || stdout != "" || !strings.Contains(stderr, "endpoints[0].hots") {
		t.Errorf("invalid file: code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func mustHash(t *testing.T, doc []byte) string {
	t.Helper()
	p, _, err := policy.Parse(doc)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return p.Hash()
}
