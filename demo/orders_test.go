package demo

import (
	"context"
	"net"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeOrders serves both tools at /mcp until its context ends.
func TestServeOrders(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ServeOrders(ctx, ln, &mcp.StreamableHTTPOptions{}) }()

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String() + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	cs.Close()
	slices.Sort(names)
	if !slices.Equal(names, []string{"lookup_order", "refund_order"}) {
		t.Errorf("tools %v", names)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeOrders after its context ended: %v", err)
	}
}
