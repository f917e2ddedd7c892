package dataplane

import (
	"encoding/json"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/policy"
)

// The proxy keeps denied arguments in RFC 8785 form, except arguments
// with a number a float64 does not hold exactly: their canonical form
// holds another number, so they are kept as written (compacted), for the
// advisor to see the number and refuse. The digest is the canonical
// form's either way, so the gateway's check of kept arguments holds.
func TestKeepArgumentsInexactNumbersAsWritten(t *testing.T) {
	p := &Proxy{arguments: decision.NewArguments(decision.ArgumentsEntries, decision.ArgumentsBytes, decision.ArgumentsPerEntry)}
	for _, c := range []struct{ args, kept string }{
		{`{ "b": 1.0, "a": "x" }`, `{"a":"x","b":1}`},
		{`{ "n": 12345678901234567890 }`, `{"n":12345678901234567890}`},
		{`{ "n": 1000.00000000000000001 }`, `{"n":1000.00000000000000001}`},
	} {
		id := decision.NewDenialID()
		digest := p.keepArguments(id, json.RawMessage(c.args))
		want, err := policy.ArgumentsDigest([]byte(c.args))
		if err != nil || digest != want {
			t.Errorf("%s: digest %q, want %q (%v)", c.args, digest, want, err)
		}
		got, ok := p.DeniedArguments(id)
		if !ok || string(got) != c.kept {
			t.Errorf("%s: kept %q (%v), want %s", c.args, got, ok, c.kept)
		}
		if d, err := policy.ArgumentsDigest(got); err != nil || d != digest {
			t.Errorf("%s: the kept arguments' digest %q differs from the record's %q (%v)", c.args, d, digest, err)
		}
	}
}
