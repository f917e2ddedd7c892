package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGatewayPrecedence(t *testing.T) {
	tests := []struct {
		name, flag, env, want string
	}{
		{"default", "", "", defaultGateway},
		{"env beats default", "", "https://env.example:7443", "https://env.example:7443"},
		{"flag beats env", "http://flag.example:7070", "https://env.example:7443", "http://flag.example:7070"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnvironment(nil, nil, nil, func(k string) string {
				if k == envGateway {
					return tt.env
				}
				return ""
			})
			env.gatewayFlag = tt.flag
			u, err := env.gatewayURL()
			if err != nil {
				t.Fatal(err)
			}
			if u.String() != tt.want {
				t.Errorf("gateway = %s, want %s", u, tt.want)
			}
		})
	}
}

// TestGatewayPrecedenceEndToEnd checks that the flag and the variable reach
// the transport: the call lands on the gateway that should win.
func TestGatewayPrecedenceEndToEnd(t *testing.T) {
	byEnv, byFlag := newFakeGateway(t), newFakeGateway(t)
	in := cliInput{env: map[string]string{envGateway: byEnv.url, envToken: adminToken}}

	_, stderr, code := runCLIWith(t, in, "sandbox", "list")
	ok(t, code, stderr)
	byEnv.last(t, "ListSandboxes")

	_, stderr, code = runCLIWith(t, in, "--gateway", byFlag.url, "sandbox", "list")
	ok(t, code, stderr)
	byFlag.last(t, "ListSandboxes")
	if len(byEnv.calls) != 0 {
		t.Errorf("the variable's gateway was called although --gateway was given")
	}
}

func TestTokenPrecedence(t *testing.T) {
	f := newFakeGateway(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("  file-token \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(dir, "empty")
	if err := os.WriteFile(emptyFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withEnv := map[string]string{envToken: "env-token"}

	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantAuth string
	}{
		{"none", nil, nil, ""},
		{"env", withEnv, nil, "Bearer env-token"},
		{"flag beats env", withEnv, []string{"--token", "flag-token"}, "Bearer flag-token"},
		{"token file beats env, trimmed", withEnv, []string{"--token-file", tokenFile}, "Bearer file-token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--gateway", f.url}, tt.args...)
			_, stderr, code := runCLIWith(t, cliInput{env: tt.env}, append(args, "token", "list")...)
			ok(t, code, stderr)
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.calls) != 1 || f.calls[0].auth != tt.wantAuth {
				t.Errorf("calls %v, want one with Authorization %q", f.calls, tt.wantAuth)
			}
			f.calls = nil
		})
	}

	for _, tt := range []struct{ name, file, want string }{
		{"empty token file", emptyFile, "is empty"},
		{"missing token file", filepath.Join(dir, "nope"), "read token file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, "--gateway", f.url, "--token-file", tt.file, "token", "list")
			if code != exitInvalid || !strings.Contains(stderr, tt.want) {
				t.Errorf("code %d, stderr:\n%s", code, stderr)
			}
		})
	}
}

// TestOfflineNeedsNoGateway checks that offline commands ignore a broken
// gateway setting and token file.
func TestOfflineNeedsNoGateway(t *testing.T) {
	_, stderr, code := runCLIWith(t, cliInput{env: map[string]string{envGateway: "not a url"}},
		"--token-file", "/nonexistent", "policy", "validate", "testdata/quickstart.yaml")
	ok(t, code, stderr)
}
