package decision

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// checkAppendJSON fails t unless appendJSON writes r exactly as
// encoding/json does.
func checkAppendJSON(t *testing.T, r Record) {
	t.Helper()
	want, werr := json.Marshal(r)
	got, gerr := appendJSON(nil, &r)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%+v: appendJSON error %v, encoding/json error %v", r, gerr, werr)
	}
	if werr == nil && !bytes.Equal(got, want) {
		t.Fatalf("%+v:\nappendJSON   %s\nencoding/json %s", r, got, want)
	}
}

// Every field of Record is written, with encoding/json's bytes: a field
// added to Record without appendJSON learning it fails here.
func TestAppendJSON(t *testing.T) {
	full := Record{}
	v := reflect.ValueOf(&full).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(v.Type().Field(i).Name + ` <a href="x">&</a> \ ` + "\u2028\u2029\x00\x1f\t\n\r\b\f é \xff")
		case reflect.Int:
			f.SetInt(int64(443 + i))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Struct:
			if f.Type() != reflect.TypeFor[time.Time]() {
				t.Fatalf("field %s: appendJSON knows no %s", v.Type().Field(i).Name, f.Type())
			}
			f.Set(reflect.ValueOf(time.Date(2026, 12, 2, 2, 30, 0, 123456789, time.FixedZone("X", 3600))))
		case reflect.Slice:
			if f.Type() != reflect.TypeFor[[]Cut]() {
				t.Fatalf("field %s: appendJSON knows no %s", v.Type().Field(i).Name, f.Type())
			}
			f.Set(reflect.ValueOf([]Cut{{Field: "path", Length: 61440, SHA256: "ab"}, {Field: "<&>\xff", Length: 300, SHA256: "cd"}}))
		case reflect.Pointer:
			if f.Type() != reflect.TypeFor[*Summary]() {
				t.Fatalf("field %s: appendJSON knows no %s", v.Type().Field(i).Name, f.Type())
			}
			f.Set(reflect.ValueOf(&Summary{Count: 600, Last: time.Date(2026, 12, 2, 2, 31, 0, 5, time.UTC), FirstDenialID: "dn_<1>", LastDenialID: "dn_2"}))
		default:
			t.Fatalf("field %s: appendJSON knows no %s", v.Type().Field(i).Name, f.Kind())
		}
	}
	for _, r := range []Record{
		full,
		{},                            // every omitempty field left out
		{Summary: &Summary{Count: 1}}, // a summary's ids left out
		{Summary: &Summary{Last: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}, // encoding/json refuses it too
		{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Host: "orders.example.com", Port: 443, Decision: Allow},
		{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Host: "h"}, // encoding/json refuses it too
	} {
		checkAppendJSON(t, r)
	}
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("orders.example.com", "/mcp", "tools/call", "lookup_order", int64(0), 443, true)
	f.Add("<&>\u2028", "\xff\xfe", "\"\\", "\x00\x7f", int64(1<<40), -1, false)
	f.Fuzz(func(t *testing.T, host, path, method, tool string, nanos int64, port int, probe bool) {
		checkAppendJSON(t, Record{
			Time:          time.Unix(0, nanos).UTC(),
			Host:          host,
			Port:          port,
			Path:          path,
			MCPMethod:     method,
			Tool:          tool,
			Reason:        host + path,
			PolicyVersion: tool,
			Decision:      Deny,
			VersionProbe:  probe,
		})
	})
}
