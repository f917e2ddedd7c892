package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
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
			if tt.flag != "" {
				env.gatewayFlag = []string{tt.flag}
			}
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
	byEnv, byFlag := startGateway(t), startGateway(t)
	in := cliInput{env: map[string]string{envGateway: byEnv.url, envToken: gatewaytest.AdminToken}}

	_, stderr, code := runCLIWith(t, in, "sandbox", "list")
	ok(t, code, stderr)
	if m := methods(byEnv.took()); m != "SandboxService.ListSandboxes" {
		t.Errorf("the variable's gateway got %q, want one ListSandboxes", m)
	}

	_, stderr, code = runCLIWith(t, in, "--gateway", byFlag.url, "sandbox", "list")
	ok(t, code, stderr)
	if m := methods(byFlag.took()); m != "SandboxService.ListSandboxes" {
		t.Errorf("the flag's gateway got %q, want one ListSandboxes", m)
	}
	if calls := byEnv.took(); len(calls) != 0 {
		t.Errorf("the variable's gateway was called although --gateway was given")
	}
}

// TestTokenPrecedence checks which token reaches the gateway: each source
// holds a different real admin token, and the recorder shows which one
// the call carried (the gateway accepting it shows it was sent whole).
func TestTokenPrecedence(t *testing.T) {
	g := startGateway(t)
	tokens := map[string]string{}
	for _, name := range []string{"env", "flag", "file"} {
		tokens[name], _ = g.json(t, gatewaytest.AdminToken, "token", "create", "--role", "admin", "--name", name)["token"].(string)
	}
	g.took()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("  "+tokens["file"]+" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(dir, "empty")
	if err := os.WriteFile(emptyFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withEnv := map[string]string{envToken: tokens["env"]}

	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantAuth string
	}{
		{"none", nil, nil, ""},
		{"env", withEnv, nil, "Bearer " + tokens["env"]},
		{"flag beats env", withEnv, []string{"--token", tokens["flag"]}, "Bearer " + tokens["flag"]},
		{"token file beats env, trimmed", withEnv, []string{"--token-file", tokenFile}, "Bearer " + tokens["file"]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--gateway", g.url}, tt.args...)
			_, stderr, code := runCLIWith(t, cliInput{env: tt.env}, append(args, "token", "list")...)
			if tt.wantAuth == "" {
				// No token: the gateway refuses, and the CLI says why.
				if code != exitNo || !strings.Contains(stderr, "no token given") {
					t.Errorf("exit %d, stderr %q; want 1 and the hint", code, stderr)
				}
			} else {
				ok(t, code, stderr)
			}
			if calls := g.took(); len(calls) != 1 || calls[0].auth != tt.wantAuth {
				t.Errorf("calls %v, want one with Authorization %q", calls, tt.wantAuth)
			}
		})
	}

	for _, tt := range []struct{ name, file, want string }{
		{"empty token file", emptyFile, "is empty"},
		{"missing token file", filepath.Join(dir, "nope"), "read token file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, "--gateway", g.url, "--token-file", tt.file, "token", "list")
			if code != exitInvalid || !strings.Contains(stderr, tt.want) {
				t.Errorf("code %d, stderr:\n%s", code, stderr)
			}
			if calls := g.took(); len(calls) != 0 {
				t.Errorf("calls %v, want none", calls)
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

// --gateway names several replicas, repeated or comma-separated, and
// PORTCULLIS_GATEWAY likewise; each must be an http(s) URL.
func TestGatewayReplicas(t *testing.T) {
	tests := []struct {
		name  string
		flag  []string
		env   string
		want  string
		usage string
	}{
		{"repeated", []string{"http://a:1", "https://b:2"}, "", "http://a:1 https://b:2", ""},
		{"commas", []string{"http://a:1, http://b:2,", "http://c:3"}, "http://env:1", "http://a:1 http://b:2 http://c:3", ""},
		{"env commas", nil, "https://a:1,https://b:2", "https://a:1 https://b:2", ""},
		{"one bad", []string{"http://a:1,b:2"}, "", "", `"b:2" is not an http:// or https:// URL`},
		{"empty", []string{","}, "", "", "--gateway: no URL"},
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
			urls, err := env.gatewayURLs()
			if tt.usage != "" {
				if err == nil || !strings.Contains(err.Error(), tt.usage) {
					t.Fatalf("err %v, want %q", err, tt.usage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, u := range urls {
				got = append(got, u.String())
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("gateways = %v, want %s", got, tt.want)
			}
		})
	}
}

// Given several replicas, a client command talks to the first that
// accepts a connection: a replica that is down is skipped.
func TestGatewayReplicaDownIsSkipped(t *testing.T) {
	live := startGateway(t)
	dead := startGateway(t)
	dead.Stop()
	in := cliInput{env: map[string]string{envToken: gatewaytest.AdminToken}}
	_, stderr, code := runCLIWith(t, in, "--gateway", dead.Gateway.URL+","+live.url, "sandbox", "list")
	ok(t, code, stderr)
	if m := methods(live.took()); m != "SandboxService.ListSandboxes" {
		t.Errorf("the live replica got %q, want one ListSandboxes", m)
	}
}
