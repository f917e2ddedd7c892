// Package demo holds what Portcullis walkthroughs and tests run: an MCP
// server with the article's order tools, served by the official MCP Go SDK
// (ServeOrders: portcullis demo mcp-server), and the README's agent
// (Agent: portcullis demo agent).
package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// OrderArgs are the arguments of both order tools.
type OrderArgs struct {
	OrderID string `json:"order_id" jsonschema:"the order, e.g. A-1042"`
}

// OrderResult is what the order tools answer.
type OrderResult struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
}

// OrdersServer returns an MCP server with lookup_order and refund_order,
// the tools of the article Portcullis started from. lookup_order reports
// progress (when the client asks for it) before answering, so a client
// sees server notifications stream through the proxy.
func OrdersServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "portcullis-demo-orders", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "lookup_order", Description: "Look up an order by id"},
		func(ctx context.Context, req *mcp.CallToolRequest, args OrderArgs) (*mcp.CallToolResult, OrderResult, error) {
			if token := req.Params.GetProgressToken(); token != nil {
				for i, msg := range []string{"finding " + args.OrderID, "reading its status"} {
					err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: token, Progress: float64(i + 1), Total: 2, Message: msg,
					})
					if err != nil {
						return nil, OrderResult{}, fmt.Errorf("notify progress: %w", err)
					}
				}
			}
			return nil, OrderResult{OrderID: args.OrderID, Status: "shipped"}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "refund_order", Description: "Refund an order (the call a policy should deny)"},
		func(ctx context.Context, req *mcp.CallToolRequest, args OrderArgs) (*mcp.CallToolResult, OrderResult, error) {
			return nil, OrderResult{OrderID: args.OrderID, Status: "refunded"}, nil
		})
	return s
}

// OrdersHandler serves OrdersServer over MCP Streamable HTTP. With
// opts.Stateless it speaks the 2026-07-28 revision (no session); otherwise
// it answers 2025-11-25 clients with sessions. Tests that reach a loopback
// server under another host name set opts.DisableLocalhostProtection.
func OrdersHandler(opts *mcp.StreamableHTTPOptions) http.Handler {
	s := OrdersServer()
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts)
}

// ServeOrders serves OrdersHandler(opts) at /mcp on ln until ctx ends
// (then it closes the server and returns its error, nil once closed) or
// serving fails.
func ServeOrders(ctx context.Context, ln net.Listener, opts *mcp.StreamableHTTPOptions) error {
	mux := http.NewServeMux()
	mux.Handle("/mcp", OrdersHandler(opts))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-errc:
		return err
	}
}
