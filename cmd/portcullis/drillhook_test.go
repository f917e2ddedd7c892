package main

import (
	"bytes"
	"os"
	"testing"
)

// The shipped binary holds no drill hook: the proxy's clock offset
// (drillhook_on.go) exists only in builds with -tags drills, which the
// fault drills (drills/) make for themselves.
func TestShippedBinaryHasNoDrillHooks(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("PORTCULLIS_DRILL_")) {
		t.Fatal("the binary built without -tags drills reads PORTCULLIS_DRILL_* variables")
	}
}
