package gatewayclient_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

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
