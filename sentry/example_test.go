package sentry_test

import (
	"fmt"

	"github.com/portcullis-dev/portcullis/sentry"
)

// A batch with one valid event and one that sends raw tool arguments: the
// valid event is read, the other refused with the field that is wrong.
func ExampleParseBatch() {
	body := []byte(`[
	  {"specversion": "1.0", "id": "e1", "source": "sentry://node-3", "sequence": 1,
	   "type": "portcullis.sentry.v1.tool_access", "subject": "sandbox-a", "time": "2026-12-01T19:00:00Z",
	   "data": {"severity": "low", "tool_call": {"server": "orders", "tool": "refund"}}},
	  {"specversion": "1.0", "id": "e2", "source": "sentry://node-3", "sequence": 2,
	   "type": "portcullis.sentry.v1.tool_access", "subject": "sandbox-a", "time": "2026-12-01T19:00:01Z",
	   "data": {"severity": "low", "tool_call": {"server": "orders", "tool": "refund", "arguments": {"amount": 100}}}}
	]`)
	b, err := sentry.ParseBatch(body)
	if err != nil {
		panic(err)
	}
	for _, ev := range b.Events {
		fmt.Println("read", ev.ID, ev.Class, ev.Payload.ToolCall.Tool)
	}
	for _, r := range b.Refused {
		fmt.Println("refused", r.ID+":", r)
	}
	// Output:
	// read e1 tool_access refund
	// refused e2: event 1: data.tool_call.arguments: raw tool arguments are refused; send arguments_digest
}
