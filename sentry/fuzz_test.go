package sentry

import (
	"encoding/json"
	"testing"
)

// FuzzParseBatch: whatever the body, ParseBatch does not panic; a readable
// batch accounts for every element once, in order, agreeing with
// ParseCloudEvent on each; every valid event can be signed (its data has a
// canonical form) and flags what it kept without understanding.
func FuzzParseBatch(f *testing.F) {
	var all []any
	for _, c := range Classes() {
		all = append(all, sample(c))
	}
	f.Add(mustJSON(f, all))
	for _, tc := range refusals() {
		f.Add([]byte("[" + string(tc.body(f)) + "]"))
	}
	f.Add([]byte(`[` + vectorEvent + `,{"id":"x"},7,null]`))
	f.Add([]byte(`[{"id":"a","id":"b"}]`))
	f.Add([]byte("[{\"id\":\"\xff\"}]"))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := ParseBatch(body)
		if err != nil {
			return
		}
		var raws []json.RawMessage
		if err := json.Unmarshal(body, &raws); err != nil {
			t.Fatalf("ParseBatch read a body encoding/json cannot: %v", err)
		}
		if len(b.Events)+len(b.Refused) != len(raws) {
			t.Fatalf("%d events + %d refused, %d elements", len(b.Events), len(b.Refused), len(raws))
		}
		next, r := 0, 0
		for i, raw := range raws {
			ev, err := ParseCloudEvent(raw)
			if r < len(b.Refused) && b.Refused[r].Index == i {
				if err == nil || b.Refused[r].Err == nil || b.Refused[r].Err.Error() != err.Error() {
					t.Fatalf("element %d: batch refused it (%v), alone: %v", i, b.Refused[r].Err, err)
				}
				r++
				continue
			}
			if err != nil {
				t.Fatalf("element %d: batch took it, alone: %v", i, err)
			}
			if b.Events[next].ID != ev.ID || b.Events[next].Sequence != ev.Sequence {
				t.Fatalf("element %d out of order", i)
			}
			next++
			if _, err := SigningBytes(ev); err != nil {
				t.Fatalf("element %d: valid but unsignable: %v", i, err)
			}
			if (ev.Flags&^FlagTimeDefaulted == 0) != (len(ev.Unknown) == 0) {
				t.Fatalf("element %d: flags %b but unknown %v", i, ev.Flags, ev.Unknown)
			}
			if ev.Class == "" && ev.Flags&FlagUnknownType == 0 {
				t.Fatalf("element %d: unknown type %q not flagged", i, ev.Type)
			}
		}
	})
}

// BenchmarkParseBatch reads a full batch of 1,000 tool_access events, the
// common case of bulk ingest.
func BenchmarkParseBatch(b *testing.B) {
	events := make([]any, MaxBatchEvents)
	for i := range events {
		ev := sample(ClassToolAccess)
		ev["sequence"] = i + 1
		events[i] = ev
	}
	body := mustJSON(b, events)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if batch, err := ParseBatch(body); err != nil || len(batch.Events) != MaxBatchEvents {
			b.Fatal(err)
		}
	}
}
