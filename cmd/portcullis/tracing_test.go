package main

import (
	"strings"
	"testing"
)

// A collector address that is not an http(s) URL stops the gateway and
// the proxy before they start, from the flag or from the standard
// variable.
func TestOTLPEndpointRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"gateway flag", nil, []string{"gateway", "--data-dir", dir, "--listen", "127.0.0.1:0", "--otlp-endpoint", "collector:4318"}},
		{"gateway env", map[string]string{envOTLPEndpoint: "ftp://collector"}, []string{"gateway", "--data-dir", dir, "--listen", "127.0.0.1:0"}},
		{"proxy flag", nil, []string{"proxy", "--policy", "p.yaml", "--data-dir", dir, "--listen", "127.0.0.1:0", "--otlp-endpoint", "http://"}},
		{"proxy env", map[string]string{envOTLPEndpoint: "collector:4318"}, []string{"proxy", "--policy", "p.yaml", "--data-dir", dir, "--listen", "127.0.0.1:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLIWith(t, cliInput{env: tc.env}, tc.args...)
			if code != exitInvalid || !strings.Contains(stderr, "--otlp-endpoint") || strings.Contains(stdout, "listening") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d naming --otlp-endpoint, nothing started", code, stdout, stderr, exitInvalid)
			}
		})
	}
}
