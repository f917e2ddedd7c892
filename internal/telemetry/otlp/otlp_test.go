package otlp_test

import (
	"testing"

	"github.com/portcullis-dev/portcullis/internal/telemetry/otlp"
)

func TestNewOffAndBadEndpoint(t *testing.T) {
	tr, err := otlp.New(otlp.Config{})
	if tr != nil || err != nil {
		t.Fatalf("New without an endpoint = %v, %v; want nil, nil", tr, err)
	}
	if tr.Provider() != nil || tr.Shutdown(t.Context()) != nil {
		t.Error("a nil Tracing must have no provider and shut down quietly")
	}
	for _, e := range []string{"collector:4318", "ftp://collector", "http://"} {
		if _, err := otlp.New(otlp.Config{Endpoint: e}); err == nil {
			t.Errorf("otlp.New(%q) accepted it", e)
		}
	}
}
