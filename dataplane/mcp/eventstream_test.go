package mcp

import "testing"

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                   false,
		"":                                   false,
		"text/event-stream":                  true,
		"Text/Event-Stream; charset=utf-8":   true,
		" text/event-stream ":                true,
		"application/json; charset=utf-8":    false,
		"text/event-stream; charset=\"utf-8": false, // unparseable
	} {
		if got := IsEventStream(ct); got != want {
			t.Errorf("IsEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}
