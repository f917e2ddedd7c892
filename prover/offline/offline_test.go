package offline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/prover/offline"
)

func document(t *testing.T, flag, yaml string) offline.Document {
	t.Helper()
	p, _, err := policy.Parse([]byte(yaml))
	d := offline.Document{Flag: flag, File: flag[2:] + ".yaml", Policy: p}
	if ve, ok := errors.AsType[*policy.ValidationError](err); ok {
		d.Problems = ve.Problems
	} else if err != nil {
		t.Fatal(err)
	}
	return d
}

const current = `version: 1
network_policies:
  api:
    name: api
    endpoints: [ { host: api.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /v1/x } } ] } ]
    binaries: [ { path: /usr/bin/curl } ]
`

// An invalid input is an InputError naming its file and problems; a
// proposed policy naming cloud metadata is a finding, not an error; a
// proof's findings make Err a FindingsError.
func TestProve(t *testing.T) {
	cur := document(t, "--current", current)
	bad := document(t, "--current", strings.Replace(current, "port: 443", "port: 0", 1))
	_, err := offline.Prove(t.Context(), bad, cur, nil, prover.Options{Budget: prover.DefaultBudget})
	ie, ok := errors.AsType[*offline.InputError](err)
	if !ok || !strings.HasPrefix(ie.Msg, "--current current.yaml is not a valid policy: ") || len(ie.Problems) != 1 || ie.Problems[0].File != "current.yaml" {
		t.Fatalf("an invalid current policy: %v", err)
	}
	if failed := (offline.Result{}).Failed(err); failed.Error != ie.Msg || len(failed.Problems) != 1 {
		t.Errorf("Failed: %+v", failed)
	}

	metadata := document(t, "--proposed", strings.Replace(current, "api.example.com", "169.254.169.254", 1))
	res, err := offline.Prove(t.Context(), cur, metadata, nil, prover.Options{Budget: prover.DefaultBudget})
	if err != nil || len(res.Findings) == 0 || res.Findings[0].Kind != prover.CloudMetadata {
		t.Fatalf("a proposed policy naming cloud metadata: %+v, %v", res, err)
	}

	wider := document(t, "--proposed", strings.Replace(current, "path: /v1/x", "path: /v1/y", 1))
	res, err = offline.Prove(t.Context(), cur, wider, nil, prover.Options{Budget: prover.DefaultBudget})
	if err != nil || len(res.Findings) == 0 {
		t.Fatalf("a widening: %+v, %v", res, err)
	}
	if fe, ok := errors.AsType[*offline.FindingsError](res.Err()); !ok || fe.Count != len(res.Findings) {
		t.Errorf("Err() = %v", res.Err())
	}
	same, err := offline.Prove(t.Context(), cur, cur, nil, prover.Options{Budget: prover.DefaultBudget})
	if err != nil || len(same.Findings) != 0 || same.Err() != nil || same.Findings == nil {
		t.Errorf("no change: %+v, %v", same, err)
	}
}
