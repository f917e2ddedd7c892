package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/demo"
)

// upstream is the MCP server every path reaches: on 127.0.0.1, or (for
// the transparent path) on an address of a network namespace of its own
// (internal/netnstest), which an agent inside `portcullis run` can only
// reach through the proxy.
type upstream struct {
	addr string // HOST:PORT
	port int
	// hits counts the requests the upstream received, so the check can see
	// that a denied call never reached it.
	hits atomic.Int64
	// valid reports whether a response body is the upstream's answer to a
	// lookup_order call (cheap: it runs on the hot path).
	valid func(body []byte) bool
	srv   *http.Server
	done  chan struct{}
}

// fixedResultSuffix ends every answer of the fixed upstream, after the id.
const fixedResultSuffix = `,"result":{"content":[{"type":"text","text":"shipped"}]}}`

// fixedAnswer is the fixed upstream's exact answer to a request with id.
func fixedAnswer(id []byte) []byte {
	b := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	return append(b, fixedResultSuffix...)
}

// validAnswer reports whether a body is upstream kind's answer to a
// lookup_order call.
func validAnswer(kind string) func(body []byte) bool {
	if kind == "sdk" {
		return func(body []byte) bool { return bytes.Contains(body, []byte(`shipped`)) }
	}
	return func(body []byte) bool { return bytes.HasSuffix(body, []byte(fixedResultSuffix)) }
}

// fixedLookupOrder is the fixed upstream's definition of lookup_order,
// which the bench policy pins.
const fixedLookupOrder = `{"name":"lookup_order","description":"Look an order up","inputSchema":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}}`

// fixedTools is the fixed upstream's tools/list result: the orders
// server's three tools, of which the bench policy lets the agent call
// one (lookup_order), so the proxy's filtered list holds that one only.
const fixedTools = `,"result":{"tools":[` + fixedLookupOrder + `,` +
	`{"name":"refund_order","description":"Refund an order","inputSchema":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}},` +
	`{"name":"cancel_order","description":"Cancel an order","inputSchema":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}}]}}`

// startUpstream serves kind ("fixed" or "sdk") on 127.0.0.1:0.
func startUpstream(kind string, listen func(network, addr string) (net.Listener, error), host string) (*upstream, error) {
	ln, err := listen("tcp4", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("upstream listen: %w", err)
	}
	u := &upstream{addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port, done: make(chan struct{})}
	var h http.Handler
	u.valid = validAnswer(kind)
	switch kind {
	case "fixed":
		h = http.HandlerFunc(serveFixed)
	case "sdk":
		// Stateless and JSON responses: each tools/call stands alone, as
		// on the other paths; no session set-up to measure.
		h = demo.OrdersHandler(&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	default:
		ln.Close()
		return nil, fmt.Errorf("unknown upstream %q", kind)
	}
	u.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.hits.Add(1)
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() {
		u.srv.Serve(ln)
		close(u.done)
	}()
	return u, nil
}

func (u *upstream) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := u.srv.Shutdown(ctx); err != nil {
		u.srv.Close()
	}
	<-u.done
}

// serveFixed answers a JSON-RPC request with a fixed tool result under
// the request's id (a tools/list with the fixed list of tools): the least
// an upstream can do, so the measurement is about the proxies in front of
// it.
func serveFixed(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	id := requestID(body)
	if id == nil {
		http.Error(w, "no JSON-RPC id", http.StatusBadRequest)
		return
	}
	answer := fixedAnswer(id)
	if bytes.Contains(body, []byte(`"method":"tools/list"`)) {
		answer = append(append([]byte(`{"jsonrpc":"2.0","id":`), id...), fixedTools...)
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(answer))}
	w.Write(answer)
}

// requestID returns the raw "id" of a JSON-RPC request: a fast scan for
// the shape the load program sends ({"jsonrpc":"2.0","id":N,...}), else a
// full decode.
func requestID(body []byte) []byte {
	const key = `"id":`
	if i := bytes.Index(body, []byte(key)); i >= 0 {
		rest := body[i+len(key):]
		if j := bytes.IndexAny(rest, ",}"); j > 0 {
			if id := bytes.TrimSpace(rest[:j]); json.Valid(id) {
				return id
			}
		}
	}
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &msg) != nil || len(msg.ID) == 0 {
		return nil
	}
	return msg.ID
}
