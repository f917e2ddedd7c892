// Package listing reads the tools an MCP server lists as an MCP client
// sees them, and fingerprints each definition from the bytes the server
// sent: what `portcullis mcp fingerprint` prints, the value a tools/call
// rule's definition pins. The MCP SDK's client connects and pages through
// tools/list; a recording transport keeps the answers it read, which
// dataplane/mcp reads as the proxy reads its own listing. The proxy never
// links this package (nor the SDK's client).
package listing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pmcp "github.com/portcullis-dev/portcullis/dataplane/mcp"
)

// Config says how to reach the server and what to speak.
type Config struct {
	// Endpoint is the server's Streamable HTTP URL.
	Endpoint string
	// ProtocolVersion is the MCP protocol version to speak.
	ProtocolVersion string
	// ClientVersion is the version the client gives in its
	// implementation info (its name is "portcullis").
	ClientVersion string
	// Transport carries the requests (a proxy, the CAs to trust); nil is
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Header is added to every request (Authorization …).
	Header http.Header
}

// Tool is one listed tool and its definition's fingerprint.
type Tool struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"`
}

// Fingerprints lists the tools at cfg.Endpoint (every page) with the MCP
// SDK's client and fingerprints each definition from the bytes the server
// sent (the SDK's Tool drops fields it does not know; a pin covers every
// field). A tool listed twice is an error: its definition is ambiguous.
func Fingerprints(ctx context.Context, cfg Config) ([]Tool, error) {
	next := cfg.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	rec := &recorder{next: next, header: cfg.Header}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "portcullis", Version: cfg.ClientVersion}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: cfg.Endpoint, HTTPClient: &http.Client{Transport: rec}, DisableStandaloneSSE: true, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: cfg.ProtocolVersion})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.Endpoint, err)
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list the tools of %s: %w", cfg.Endpoint, err)
		}
		names = append(names, tool.Name)
	}
	defs, err := rec.definitions()
	if err != nil {
		return nil, err
	}
	out := make([]Tool, 0, len(names))
	for _, name := range names {
		def, ok := defs[name]
		if !ok {
			return nil, fmt.Errorf("tool %s: its definition was not among the answers read", name)
		}
		fp, err := pmcp.Fingerprint(def)
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", name, err)
		}
		out = append(out, Tool{Name: name, Fingerprint: fp})
	}
	return out, nil
}

// recorder keeps the bytes of every answer to a tools/list request it
// carries, as the SDK's client reads them, and adds headers.
type recorder struct {
	next   http.RoundTripper
	header http.Header

	mu      sync.Mutex
	answers []answer
}

// answer is one recorded answer to a tools/list request.
type answer struct {
	id     json.RawMessage
	stream bool
	body   *bytes.Buffer
}

// maxRecorded bounds one recorded answer.
const maxRecorded = 8 << 20

func (l *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range l.header {
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
	a := answer{id: msg.ID, stream: strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream"), body: &bytes.Buffer{}}
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
func (l *recorder) definitions() (map[string][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defs := map[string][]byte{}
	for _, a := range l.answers {
		tools, _, found, err := pmcp.ReadListAnswer(bytes.NewReader(a.body.Bytes()), a.stream, a.id, maxRecorded)
		if err != nil {
			return nil, fmt.Errorf("read the server's tools/list answer: %w", err)
		}
		if !found {
			return nil, errors.New("a tools/list answer the client read could not be found in the bytes recorded")
		}
		for _, t := range tools {
			if _, twice := defs[t.Name]; twice {
				return nil, fmt.Errorf("the server lists tool %s twice: its definition is ambiguous, and the proxy holds no pin for it", t.Name)
			}
			defs[t.Name] = t.Definition
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
