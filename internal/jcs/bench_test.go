package jcs

import (
	"strconv"
	"strings"
	"testing"
)

// BenchmarkTransform canonicalises a tool definition as a server lists it
// (what the proxy pins) and a Sentry event's data (what is signed).
func BenchmarkTransform(b *testing.B) {
	var props []string
	for i := range 20 {
		props = append(props, `"p`+strconv.Itoa(i)+`": {"type": "string", "description": "the `+strconv.Itoa(i)+`th field, \u00e9", "maxLength": 64}`)
	}
	tool := `{"name": "lookup_order", "description": "Look an order up by its id.", "inputSchema": {"type": "object", "properties": {` +
		strings.Join(props, ", ") + `}, "required": ["p0", "p1"], "additionalProperties": false}}`
	data := `{"severity":"info","processing":"record","tool_call":{"tool":"lookup_order","arguments_digest":"sha256:d3626ac30a87e6f7a6428233b3c68299976865fa5508e4267c5415c76af7a772"},` +
		`"correlation":{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","jsonrpc_id":"42"},"confidence":0.75,"count":12}`
	for _, bc := range []struct{ name, in string }{{"tool", tool}, {"event-data", data}} {
		b.Run(bc.name, func(b *testing.B) {
			in := []byte(bc.in)
			if _, err := Transform(in, 33); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				Transform(in, 33)
			}
		})
	}
}
