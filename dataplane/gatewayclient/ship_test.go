package gatewayclient_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
)

// Flush returns at once when nothing is buffered, and otherwise waits for
// Run: without it, until its context ends.
func TestShipperFlushWaitsForShipping(t *testing.T) {
	s := gatewayclient.NewShipper(gatewayclient.ShipperConfig{Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err := s.Flush(t.Context()); err != nil {
		t.Fatalf("Flush with nothing buffered = %v", err)
	}
	s.Offer(decision.Record{Decision: decision.Deny, DenialID: "dn_1"})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := s.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with no Run = %v; want the context's deadline", err)
	}
	if n, _ := s.Pending(); n != 1 {
		t.Fatalf("pending = %d; want the record kept", n)
	}
}

// Tool definition changes wait in a bounded buffer of their own; one with
// neither a fingerprint nor a definition (over 64 KiB and not
// canonicalisable) has nothing the gateway could keep and is not buffered.
func TestShipperDefinitionBuffer(t *testing.T) {
	s := gatewayclient.NewShipper(gatewayclient.ShipperConfig{Interval: time.Hour, DefinitionBuffer: 2, Logger: slog.New(slog.DiscardHandler)})
	c := decision.ToolDefinitionChange{Host: "m.example.com", Port: 443, Path: "/mcp", Tool: "t", After: "sha256:" + strings.Repeat("a", 64)}
	s.OfferDefinition(decision.ToolDefinitionChange{Host: "m.example.com", Port: 443, Tool: "huge"})
	if n := s.PendingDefinitions(); n != 0 {
		t.Fatalf("pending = %d after a change with nothing to keep", n)
	}
	for range 3 {
		s.OfferDefinition(c)
	}
	if n := s.PendingDefinitions(); n != 2 {
		t.Fatalf("pending = %d; want the buffer's bound, 2", n)
	}
	if n, _ := s.Pending(); n != 0 {
		t.Fatalf("records pending = %d; definitions have a buffer of their own", n)
	}
}

// With no gateway listening, Flush does not wait out its context: the
// attempt it asks for fails with Unavailable and Flush returns that, also
// while Run backs off after earlier failures (Flush cuts the wait short).
func TestShipperFlushSaysTheGatewayIsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now: connections are refused
	discard := slog.New(slog.DiscardHandler)
	sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
		Gateway: "http://" + addr, Sandbox: "agent-1", Token: func() (string, error) { return "pcs_test", nil },
		ProxyID: "p1", DataDir: t.TempDir(), Logger: discard,
	}, &proxy{})
	if err != nil {
		t.Fatal(err)
	}
	s := gatewayclient.NewShipper(gatewayclient.ShipperConfig{Interval: time.Hour, Logger: discard})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, sub); close(done) }()
	t.Cleanup(func() { cancel(); <-done; sub.Close() })

	for i := range 3 {
		s.Offer(decision.Record{Decision: decision.Deny, DenialID: fmt.Sprintf("dn_%d", i)})
		// The deadline only guards the test: Flush must end on the
		// failed attempt, long before it.
		fctx, fcancel := context.WithTimeout(t.Context(), time.Minute)
		err := s.Flush(fctx)
		fcancel()
		if status.Code(err) != codes.Unavailable || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("Flush %d = %v; want Unavailable, the gateway unreachable", i, err)
		}
	}
	if n, _ := s.Pending(); n != 3 {
		t.Fatalf("pending = %d; want the 3 records kept for later", n)
	}
}

// Denials may fill only three quarters of the buffer: with the gateway
// away and a flood of denials, an allowed request is still buffered.
func TestShipperKeepsRoomForAllowed(t *testing.T) {
	s := gatewayclient.NewShipper(gatewayclient.ShipperConfig{Buffer: 8, Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	for i := range 20 {
		s.Offer(decision.Record{Decision: decision.Deny, DenialID: fmt.Sprintf("dn_%d", i)})
	}
	if n, dropped := s.Pending(); n != 6 || dropped != 14 {
		t.Fatalf("after 20 denials: %d pending, %d dropped; want 6 and 14", n, dropped)
	}
	s.Offer(decision.Record{Decision: decision.Allow})
	s.Offer(decision.Record{Decision: decision.Audit})
	if n, dropped := s.Pending(); n != 8 || dropped != 14 {
		t.Fatalf("after 2 allowed: %d pending, %d dropped; want 8 and 14", n, dropped)
	}
}
