package decisionpb_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/decision/decisionpb"
)

// Every field the API carries comes back as it went: a field added to
// Record without the conversion learning it fails here (TraceID alone
// has no field in the API).
func TestRoundTrip(t *testing.T) {
	full := decision.Record{}
	v := reflect.ValueOf(&full).Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch {
		case name == "TraceID":
		case f.Kind() == reflect.String:
			f.SetString(name)
		case f.Kind() == reflect.Int:
			f.SetInt(443)
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Type() == reflect.TypeFor[time.Time]():
			f.Set(reflect.ValueOf(time.Date(2026, 12, 2, 2, 30, 0, 123456789, time.UTC)))
		case f.Type() == reflect.TypeFor[[]decision.Cut]():
			f.Set(reflect.ValueOf([]decision.Cut{{Field: "path", Length: 61440, SHA256: "ab"}}))
		case f.Type() == reflect.TypeFor[*decision.Summary]():
			f.Set(reflect.ValueOf(&decision.Summary{Count: 600, Last: time.Date(2026, 12, 2, 2, 31, 0, 5, time.UTC), FirstDenialID: "dn_1", LastDenialID: "dn_2"}))
		default:
			t.Fatalf("field %s: the test knows no %s", name, f.Type())
		}
	}
	for _, r := range []decision.Record{full, {Time: full.Time, Decision: decision.Allow}} {
		if got := decisionpb.FromProto(decisionpb.ToProto(&r)); !reflect.DeepEqual(got, r) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
		}
	}
	if p := decisionpb.ToProto(&decision.Record{TraceID: "0af7651916cd43dd8448eb211c80319c"}); p.GetProxyId() != "" {
		t.Errorf("proxy_id = %q; the gateway sets it", p.GetProxyId())
	}
}
