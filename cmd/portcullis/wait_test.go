package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// -o json with --wait: the answer's own keys, then "enforcement" with
// every counter, zero or not; an empty answer gains the key alone.
func TestPrintJSONEnforced(t *testing.T) {
	enf := &portcullisv1.Enforcement{Sandbox: "orders", Version: 4, Acked: 2, Total: 2,
		Proxies: []*portcullisv1.ProxyEnforcement{{ProxyId: "p1", State: "acked"}, {ProxyId: "p2", State: "acked"}}}
	for _, tc := range []struct {
		name string
		msg  proto.Message
		keys []string
	}{
		{"policy version", &portcullisv1.PolicyVersion{Sandbox: "orders", Version: 4, Hash: "ab"}, []string{"sandbox", "version", "hash", "enforcement"}},
		{"empty", &portcullisv1.PolicyVersion{}, []string{"enforcement"}},
		{"proposal already carrying one", &portcullisv1.Proposal{Id: 7, Enforcement: &portcullisv1.Enforcement{Version: 1}}, []string{"id", "enforcement"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			env := newEnvironment(nil, &out, &out, nil)
			if err := env.printJSONEnforced(tc.msg, enf); err != nil {
				t.Fatal(err)
			}
			var keys []string
			dec := json.NewDecoder(strings.NewReader(out.String()))
			if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
				t.Fatalf("not a JSON object: %s", out.String())
			}
			for dec.More() {
				k, _ := dec.Token()
				keys = append(keys, k.(string))
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					t.Fatal(err)
				}
			}
			if strings.Join(keys, ",") != strings.Join(tc.keys, ",") {
				t.Fatalf("keys %v, want %v:\n%s", keys, tc.keys, out.String())
			}
			var m struct{ Enforcement map[string]any }
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"version", "acked", "nacked", "pending", "total", "ms"} {
				if _, ok := m.Enforcement[k]; !ok {
					t.Errorf("enforcement has no %q: %v", k, m.Enforcement)
				}
			}
			if m.Enforcement["version"] != float64(4) || m.Enforcement["nacked"] != float64(0) {
				t.Errorf("enforcement %v", m.Enforcement)
			}
			if tc.name == "proposal already carrying one" && tc.msg.(*portcullisv1.Proposal).GetEnforcement().GetVersion() != 1 {
				t.Error("printing changed the caller's proposal")
			}
		})
	}
}
