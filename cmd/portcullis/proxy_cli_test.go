package main

import (
	"os"
	"strings"
	"testing"
)

// A gateway-mode proxy refuses, before starting, a token on the command
// line, a missing token file, both modes at once, and a plaintext token
// to a non-loopback gateway unless --insecure (any of its replicas).
func TestProxyGatewayModeRefusals(t *testing.T) {
	dir := t.TempDir()
	tokenFile := dir + "/token"
	if err := os.WriteFile(tokenFile, []byte("pcs_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"token on the command line", []string{"--token", "pcs_x", "proxy", "--sandbox", "s"}, "only from --token-file"},
		{"no token file", []string{"proxy", "--sandbox", "s"}, "only from --token-file"},
		{"both modes", []string{"--token-file", tokenFile, "proxy", "--sandbox", "s", "--policy", "p.yaml"}, "not both"},
		{"neither mode", []string{"proxy"}, "--policy FILE, or --sandbox"},
		{"plaintext beyond loopback", []string{"--gateway", "http://gateway.example:7070", "--token-file", tokenFile, "proxy", "--sandbox", "s", "--data-dir", dir}, "--insecure"},
		{"plaintext beyond loopback, one replica of two", []string{"--gateway", "http://127.0.0.1:1", "--gateway", "http://gateway.example:7070", "--token-file", tokenFile, "proxy", "--sandbox", "s", "--data-dir", dir}, "in plaintext to http://gateway.example:7070"},
		{"plaintext beyond loopback, comma-separated", []string{"--gateway", "https://a.example:7070,http://b.example:7070", "--token-file", tokenFile, "proxy", "--sandbox", "s", "--data-dir", dir}, "in plaintext to http://b.example:7070"},
		{"a gateway URL with a path", []string{"--gateway", "http://127.0.0.1:1/api", "--token-file", tokenFile, "proxy", "--sandbox", "s", "--data-dir", dir}, "without credentials or a path"},
		{"bad gateway key", []string{"--gateway", "http://127.0.0.1:1", "--token-file", tokenFile, "proxy", "--sandbox", "s", "--data-dir", dir, "--gateway-key", "ed25519:zz"}, "--gateway-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, tc.args...)
			if code != exitInvalid || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", code, stderr, exitInvalid, tc.want)
			}
		})
	}
}
