package apiclient

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// cliOptions are the CLI's -o json options: proto names, indented (which
// MarshalJSON's rewriting makes compact).
var cliOptions = protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}

func TestIntsAsNumbers(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	doc, err := structpb.NewStruct(map[string]any{"id": "7", "port": 443})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		m    proto.Message
		want string
	}{
		{"int64 fields", &portcullisv1.VerifyAuditResponse{Ok: true, Entries: 50, FirstBadSeq: -2},
			`{"ok":true,"entries":50,"first_bad_seq":-2}`},
		{"nested, repeated, a map of strings that look like numbers", &portcullisv1.ListAuditResponse{Entries: []*portcullisv1.AuditEntry{
			{Seq: 1, Time: timestamppb.New(t0), Action: "<policy.set>", Detail: map[string]string{"version": "3"}},
			{Seq: 9007199254740993},
		}}, `{"entries":[{"seq":1,"time":"2026-01-02T03:04:05Z","action":"<policy.set>","detail":{"version":"3"}},{"seq":9007199254740993}]}`},
		{"uint64 ids, a Struct kept as it is", &portcullisv1.Proposal{Id: 3, SupersededBy: 18446744073709551615, Proposal: doc},
			`{"id":3,"proposal":{"id":"7","port":443},"superseded_by":18446744073709551615}`},
	} {
		b, err := MarshalJSON(cliOptions, tt.m)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !json.Valid(b) {
			t.Fatalf("%s: not JSON:\n%s", tt.name, b)
		}
		if string(b) != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, b, tt.want)
		}
	}
}

// MarshalJSONWith adds the key after the message's own, replacing a field
// of that name, and leaves the message as it was.
func TestMarshalJSONWith(t *testing.T) {
	p := &portcullisv1.Proposal{Id: 7, Enforcement: &portcullisv1.Enforcement{Version: 1}}
	b, err := MarshalJSONWith(protojson.MarshalOptions{UseProtoNames: true}, p, "enforcement", &portcullisv1.Enforcement{Version: 4})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":7,"enforcement":{"sandbox":"","version":4,"acked":0,"nacked":0,"pending":0,"total":0,"ms":0,"proxies":[]}}`; string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	if p.GetEnforcement().GetVersion() != 1 {
		t.Error("the message was changed")
	}
	if b, err = MarshalJSONWith(protojson.MarshalOptions{}, &portcullisv1.PolicyVersion{}, "enforcement", &portcullisv1.Enforcement{}); err != nil || !json.Valid(b) {
		t.Errorf("empty message: %s, %v", b, err)
	}
}
