package gatewayclient_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A token the gateway refuses is said once, at Error, however many times
// the proxy tries again, and no reconnection is warned of. Without
// ExitOnAuthFailure the subscription keeps trying until its context ends;
// with it, Run gives up with ErrTokenRefused once the grace has passed,
// and nothing is applied meanwhile.
func TestSubscriberRefusedToken(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	if _, err := newAdminAPI(gw.URL).Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy}); err != nil {
		t.Fatal(err)
	}
	run := func(exit bool, ctx context.Context) (string, *proxy, error) {
		logs, err := os.Create(filepath.Join(t.TempDir(), "log")) // written by the subscriber's goroutines
		if err != nil {
			t.Fatal(err)
		}
		defer logs.Close()
		p := &proxy{}
		sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
			Gateway: gw.URL, Sandbox: "agent-1", Token: func() (string, error) { return "pcs_not-this-gateways-token-0123456789", nil },
			ProxyID: "p1", DataDir: t.TempDir(), MaxBackoff: 20 * time.Millisecond,
			Logger:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
			ExitOnAuthFailure: exit, AuthFailureGrace: 300 * time.Millisecond,
		}, p)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		err = sub.Run(ctx)
		written, _ := os.ReadFile(logs.Name())
		return string(written), p, err
	}
	check := func(logs string) {
		t.Helper()
		if n := strings.Count(logs, "level=ERROR"); n != 1 || !strings.Contains(logs, "refused this proxy's token") || !strings.Contains(logs, "rotate-token agent-1") {
			t.Errorf("want one ERROR naming the token and its fix, got %d:\n%s", n, logs)
		}
		if strings.Contains(logs, "level=WARN") {
			t.Errorf("a refused token was warned of:\n%s", logs)
		}
	}

	// Off: it keeps trying (well past the grace) until stopped. (Stopped
	// by a cancel, not a deadline, which grpc-go may see first and end a
	// stream with, as any stream that fails.)
	ctx, cancel := context.WithCancel(t.Context())
	defer time.AfterFunc(1500*time.Millisecond, cancel).Stop()
	logs, _, err := run(false, ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("without ExitOnAuthFailure Run returned %v, want it to run until its context ended", err)
	}
	check(logs)

	// On: it gives up by itself.
	ctx, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	logs, p, err := run(true, ctx)
	if !errors.Is(err, gatewayclient.ErrTokenRefused) || ctx.Err() != nil {
		t.Fatalf("with ExitOnAuthFailure Run returned %v (context: %v), want ErrTokenRefused before its context ended", err, ctx.Err())
	}
	if !strings.Contains(err.Error(), "invalid token") || !strings.Contains(err.Error(), "rotate-token agent-1") {
		t.Errorf("the error says neither the gateway's reason nor the fix: %v", err)
	}
	check(logs)
	if p.PolicyVersion() != "" {
		t.Errorf("a version was applied with a refused token: %q", p.PolicyVersion())
	}
}
