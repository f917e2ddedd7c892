package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/sentry"
)

// TestBulkEvent: the hand-appended bulk event is the event the benchmark
// has always sent (as fmt wrote it), and the gateway's reader takes it.
func TestBulkEvent(t *testing.T) {
	now := time.Date(2026, 12, 1, 19, 0, 0, 123456789, time.UTC)
	sub := subject{name: "sb-007", hash: madeUpHash}
	for _, seq := range []uint64{1, 99, 123456789} {
		src := sourceName(2)
		want := fmt.Sprintf(`{"specversion":"1.0","id":"%s-%d","source":%q,"sequence":%d,`+
			`"type":"portcullis.sentry.v1.tool_access","subject":%q,"time":%q,"datacontenttype":"application/json",`+
			`"data":{"severity":"info","processing":"store_only",`+
			`"agent":{"id":"spiffe://corp.example/agent/%s","name":"orders-agent","delegated_scope":["orders:read","orders:lookup"]},`+
			`"process":{"pid":%d,"executable":"/usr/bin/python3.12","executable_digest":"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},`+
			`"node":{"id":"node-17","dpu":"bf4-0000:03:00.0"},`+
			`"policy":{"version":1,"hash":%q},`+
			`"correlation":{"session":"s-%d","jsonrpc_id":%d,"trace_id":"%016x%016x"},`+
			`"tool_call":{"server":"orders","tool":"lookup_order","arguments_digest":"sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}}}`,
			src, seq, src, seq, sub.name, now.Format(time.RFC3339Nano), sub.name, 1000+seq%30000, sub.hash, seq/100, seq, seq|1<<62, seq)
		got := string(appendBulkEvent(nil, src, seq, sub, now.Format(time.RFC3339Nano)))
		if got != want {
			t.Fatalf("sequence %d:\n got %s\nwant %s", seq, got, want)
		}
		if _, err := sentry.ParseCloudEvent([]byte(got)); err != nil {
			t.Fatalf("the reader refuses the bulk event: %v", err)
		}
	}
}
