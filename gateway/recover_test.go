package gateway

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/gateway/transport"
)

func TestRecoverPanics(t *testing.T) {
	handler := transport.RecoverPanics(func(context.Context, connect.Spec, connect.ServerStream) error {
		panic("boom")
	})
	err := handler(t.Context(), connect.Spec{Procedure: "/x.Y/Z"}, nil)
	if err == nil || !strings.Contains(err.Error(), "panic in /x.Y/Z: boom") {
		t.Fatalf("RecoverPanics = %v, want the panic as an error", err)
	}
	// Mapped like any unknown error: Internal, generic message.
	mapped := toConnectError(t.Context(), discardLogger(), "/x.Y/Z", err)
	if connect.CodeOf(mapped) != connect.CodeInternal || strings.Contains(mapped.Error(), "boom") {
		t.Fatalf("mapped panic = %v, want a generic Internal error", mapped)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
