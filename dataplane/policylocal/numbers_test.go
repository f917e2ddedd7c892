package policylocal

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// policy.local's numbers are JSON numbers, as its documentation promises:
// a proposal's 64-bit ids (protojson writes "12"), and the version in
// force when it is a stored version. Free-form parts (the proposal file,
// the resulting policy) keep their own JSON, strings included.
func TestNumbersAreJSONNumbers(t *testing.T) {
	doc, err := structpb.NewStruct(map[string]any{"rationale": "12", "port": 443})
	if err != nil {
		t.Fatal(err)
	}
	prop := &portcullisv1.Proposal{Id: 12, SupersededBy: 13, BaseVersion: 7, Status: "superseded", Proposal: doc, ResultingHash: "34"}
	dec := json.NewDecoder(bytes.NewReader(proposalJSON(prop)))
	dec.UseNumber()
	var got map[string]any
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	file, _ := got["proposal"].(map[string]any)
	if got["id"] != json.Number("12") || got["superseded_by"] != json.Number("13") || got["base_version"] != json.Number("7") ||
		got["resulting_hash"] != "34" || file["rationale"] != "12" || file["port"] != json.Number("443") {
		t.Errorf("proposal JSON = %v; want id, superseded_by and base_version as numbers, strings kept", got)
	}

	for label, want := range map[string]any{"7": uint64(7), "sha256:0123456789ab": "sha256:0123456789ab", "": ""} {
		if v := versionJSON(label); v != want {
			t.Errorf("versionJSON(%q) = %#v, want %#v", label, v, want)
		}
	}
}

// Every violation the gateway named reaches the agent: "refusals" in
// order, the first also as "refusal".
func TestRelayErrorRefusals(t *testing.T) {
	pl := New(Config{Logger: slog.New(slog.DiscardHandler)})
	st, err := status.New(codes.InvalidArgument, "2 refusals").WithDetails(
		&portcullisv1.ProposalRefusal{Operation: 0, Field: "operations[0].add_rule.rule.binaries[0].path", Rule: "binary", Reason: "a glob"},
		&portcullisv1.ProposalRefusal{Operation: 1, Field: "operations[1].add_allow_rules.rules[0].allow.path", Rule: "path", Reason: "every path"},
	)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	writeErrorBody(rec, pl.relayError(st.Err()))
	var body struct {
		Refusal  map[string]any   `json:"refusal"`
		Refusals []map[string]any `json:"refusals"`
	}
	if err := json.NewDecoder(rec.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusBadRequest || len(body.Refusals) != 2 || body.Refusal["rule"] != "binary" ||
		body.Refusals[0]["field"] != "operations[0].add_rule.rule.binaries[0].path" || body.Refusals[1]["rule"] != "path" || body.Refusals[1]["operation"] != float64(1) {
		t.Errorf("answer %d %+v; want both refusals in order", rec.Code, body)
	}
}
