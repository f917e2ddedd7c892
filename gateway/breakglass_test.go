package gateway_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// PORTCULLIS_BOOTSTRAP_TOKEN on a store that has an admin token makes
// nothing, and the gateway says so at WARN with the way to mint an admin
// token offline.
func TestBootstrapTokenIgnoredWarns(t *testing.T) {
	ctx := context.Background()
	lite, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	defer st.Close()
	var logs bytes.Buffer
	for i, token := range []string{gatewaytest.AdminToken, gatewaytest.AdminToken + "-other"} {
		logs.Reset()
		gw, err := gateway.New(gateway.Config{BootstrapToken: token, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, st)
		if err != nil {
			t.Fatal(err)
		}
		_, created, err := gw.Bootstrap(ctx)
		if err != nil || created != (i == 0) {
			t.Fatalf("Bootstrap #%d: created %v, %v", i, created, err)
		}
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "PORTCULLIS_BOOTSTRAP_TOKEN ignored") ||
		!strings.Contains(out, "token create --role admin") {
		t.Errorf("second start's log = %q; want a WARN that the bootstrap token was ignored, naming the break-glass command", out)
	}
}
