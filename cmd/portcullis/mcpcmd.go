//go:build !proxyonly

package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	pmcp "github.com/portcullis-dev/portcullis/dataplane/mcp"
)

// newMCPCmd is `portcullis mcp`: tools for operators of MCP endpoints.
func newMCPCmd(env *environment) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "mcp",
		Short:   "Look at MCP servers as the proxy sees them",
		Example: `  portcullis mcp fingerprint http://127.0.0.1:8081/mcp`,
	}
	cmd.AddCommand(newMCPFingerprintCmd(env))
	return cmd
}

// fingerprintedTool is one line of `mcp fingerprint`.
type fingerprintedTool struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"`
}

func newMCPFingerprintCmd(env *environment) *cobra.Command {
	var (
		proxy, caFile, version string
		headers                []string
	)
	cmd := &cobra.Command{
		Use:   "fingerprint URL",
		Short: "Print the definition fingerprint of each tool an MCP server lists",
		Long: `Connect to the MCP server at URL (Streamable HTTP), list its tools (every
page) and print each tool's definition fingerprint: the SHA-256 of the tool
object exactly as the server lists it, canonicalised with RFC 8785 (JCS) —
what a tools/call rule's definition pins:

  - allow:
      method: tools/call
      tool: lookup_order
      definition: "sha256:…"

With --proxy the server is reached through a Portcullis proxy, as the agent
reaches it (the list is then the one the proxy lets through, and a proxy
that terminates TLS needs its CA: --ca-file).`,
		Example: `  portcullis mcp fingerprint http://127.0.0.1:8081/mcp
  portcullis mcp fingerprint https://orders.example.com/mcp --proxy http://127.0.0.1:3128 --ca-file ca.pem -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := fingerprintClient(proxy, caFile, headers)
			if err != nil {
				return err
			}
			env.started = true
			tools, err := fingerprintTools(cmd, args[0], version, client)
			if err != nil {
				return err
			}
			if env.jsonOutput() {
				b, err := json.MarshalIndent(map[string]any{"tools": tools}, "", jsonOptions.Indent)
				if err != nil {
					return err
				}
				_, err = env.stdout.Write(append(b, '\n'))
				return err
			}
			tw := env.table("FINGERPRINT", "TOOL")
			for _, t := range tools {
				fmt.Fprintf(tw, "%s\t%s\n", t.Fingerprint, t.Name)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&proxy, "proxy", "", "reach the server through this HTTP proxy (a Portcullis proxy: http://HOST:PORT)")
	cmd.Flags().StringVar(&caFile, "ca-file", "", "PEM CA certificates to trust besides the system's (a proxy's CA: portcullis proxy ca)")
	cmd.Flags().StringVar(&version, "protocol-version", "2025-11-25", "MCP protocol version to speak")
	cmd.Flags().StringArrayVar(&headers, "header", nil, "an HTTP header for every request, 'Name: value' (repeatable), such as Authorization")
	return cmd
}

// fingerprintClient is the HTTP client of `mcp fingerprint`.
func fingerprintClient(proxy, caFile string, headers []string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if proxy != "" {
		u, err := url.Parse(proxy)
		if err != nil || u.Host == "" {
			return nil, usagef("--proxy %q is not a URL such as http://127.0.0.1:3128", proxy)
		}
		tr.Proxy = http.ProxyURL(u)
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, usagef("--ca-file: %v", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, usagef("--ca-file %s holds no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	h := http.Header{}
	for _, kv := range headers {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usagef("--header %q: want 'Name: value'", kv)
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return &http.Client{Transport: &listRecorder{next: tr, headers: h}}, nil
}

// fingerprintTools lists the tools at endpoint with the MCP SDK's client
// and fingerprints each definition from the bytes the server sent (the
// SDK's Tool drops fields it does not know; a pin covers every field).
func fingerprintTools(cmd *cobra.Command, endpoint, version string, client *http.Client) ([]fingerprintedTool, error) {
	rec := client.Transport.(*listRecorder)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "portcullis", Version: buildVersion()}, nil).Connect(cmd.Context(),
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: client, DisableStandaloneSSE: true, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(cmd.Context(), nil) {
		if err != nil {
			return nil, fmt.Errorf("list the tools of %s: %w", endpoint, err)
		}
		names = append(names, tool.Name)
	}
	defs, err := rec.definitions()
	if err != nil {
		return nil, err
	}
	out := make([]fingerprintedTool, 0, len(names))
	for _, name := range names {
		def, ok := defs[name]
		if !ok {
			return nil, fmt.Errorf("tool %s: its definition was not among the answers read", name)
		}
		fp, err := pmcp.Fingerprint(def)
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", name, err)
		}
		out = append(out, fingerprintedTool{Name: name, Fingerprint: fp})
	}
	return out, nil
}

// listRecorder keeps the bytes of every answer to a tools/list request
// it carries, as the SDK's client reads them, and adds headers.
type listRecorder struct {
	next    http.RoundTripper
	headers http.Header

	mu      sync.Mutex
	answers []recordedAnswer
}

type recordedAnswer struct {
	id     json.RawMessage
	stream bool
	body   *bytes.Buffer
}

// maxRecorded bounds one recorded answer.
const maxRecorded = 8 << 20

func (l *listRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range l.headers {
		req.Header[k] = v
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if req.Body != nil && req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			body, _ := io.ReadAll(io.LimitReader(b, maxRecorded))
			b.Close()
			json.Unmarshal(body, &msg)
		}
	}
	res, err := l.next.RoundTrip(req)
	if err != nil || msg.Method != "tools/list" || res.StatusCode != http.StatusOK {
		return res, err
	}
	a := recordedAnswer{id: msg.ID, stream: strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream"), body: &bytes.Buffer{}}
	l.mu.Lock()
	l.answers = append(l.answers, a)
	l.mu.Unlock()
	res.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(res.Body, &limitedWriter{w: a.body, n: maxRecorded}), res.Body}
	return res, nil
}

// definitions returns each listed tool's definition bytes, by name. A
// tool listed twice (in one answer or on two pages) is an error: its
// definition is ambiguous, and the proxy holds no pin for it.
func (l *listRecorder) definitions() (map[string][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defs := map[string][]byte{}
	for _, a := range l.answers {
		msgs := [][]byte{a.body.Bytes()}
		if a.stream {
			msgs = nil
			events := pmcp.NewEventReader(bytes.NewReader(a.body.Bytes()), maxRecorded)
			for {
				ev, err := events.Next()
				if err != nil {
					break
				}
				if ev.Message() { // not a priming event, a comment …
					msgs = append(msgs, ev.Data)
				}
			}
		}
		found := false
		for _, m := range msgs {
			tools, _, ok, err := pmcp.ReadToolsList(m, a.id)
			if err != nil {
				return nil, fmt.Errorf("read the server's tools/list answer: %w", err)
			}
			if ok {
				found = true
				for _, t := range tools {
					if _, twice := defs[t.Name]; twice {
						return nil, fmt.Errorf("the server lists tool %s twice: its definition is ambiguous, and the proxy holds no pin for it", t.Name)
					}
					defs[t.Name] = t.Definition
				}
			}
		}
		if !found {
			return nil, errors.New("a tools/list answer the client read could not be found in the bytes recorded")
		}
	}
	return defs, nil
}

// limitedWriter writes at most n bytes to w and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
