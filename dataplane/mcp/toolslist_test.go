package mcp

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A message is left unread only when no client could find a "tools"
// member in it.
func TestMayListTools(t *testing.T) {
	for msg, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"shipped"}]}}`: false,
		`{"id":1,"result":{"tools":[]}}`:      true,
		`{"id":1,"result":{"TOOLS":[]}}`:      true,
		`{"id":1,"result":{"Toolſ":[]}}`:      true, // ſ folds to s
		`{"id":1,"result":{"\u0074ools":[]}}`: true,
		`{"id":1,"result":{"too\u006cs":[]}}`: true,
		`{"id":1,"result":{"text":"a tool"}}`: true, // read, then passed
		`{"id":1,"result":{"content":"tol"}}`: false,
		``:                                    false,
	} {
		if got := mayListTools([]byte(msg)); got != want {
			t.Errorf("mayListTools(%s) = %v, want %v", msg, got, want)
		}
	}
}

// The answer to one of the POST's other requests passes as sent, however
// it looks; any other id's tools are filtered by shape.
func TestFilterToolsListOtherAnswers(t *testing.T) {
	l := ListResponse{IDs: map[string]bool{}, Own: []json.RawMessage{json.RawMessage(`5`)}}
	drop := func(name string, _ []byte, _ bool) bool { return name != "hidden" }
	own := `{"jsonrpc":"2.0","id":5,"result":{"tools":[{"name":"hidden"}]}}`
	out, removed, err := FilterToolsList([]byte(own), l, drop)
	if err != nil || removed != 0 || string(out) != own {
		t.Fatalf("own answer: %s, %d, %v; want it unchanged", out, removed, err)
	}
	for _, foreign := range []string{
		`{"jsonrpc":"2.0","id":4,"result":{"tools":[{"name":"hidden"},{"name":"shown"}]}}`,
		`{"jsonrpc":"2.0","id":"5","result":{"tools":[{"name":"hidden"},{"name":"shown"}]}}`,
	} {
		out, removed, err := FilterToolsList([]byte(foreign), l, drop)
		if err != nil || removed != 1 {
			t.Fatalf("another id's answer %s: %s, %d, %v; want hidden removed", foreign, out, removed, err)
		}
	}
	if _, _, err := FilterToolsList([]byte(`{"jsonrpc":"2.0","id":4,"result":{"tools":{}}}`), l, drop); err == nil {
		t.Fatal("another id's malformed tools: no error")
	}
}

// A message mayListTools leaves unread holds no "tools" member under
// either reading: the proxy's strict one, or encoding/json's (keys
// matched ignoring case, with Unicode folding), as Go clients read it.
func FuzzMayListTools(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"}]}}`,
		`{"id":1,"result":{"TOOLS":[]}}`,
		`{"id":1,"result":{"content":[{"type":"text","text":"x"}]}}`,
		`[{"id":1,"result":{"toolſ":[1]}}]`,
		`{"result":{"\u0074ools":[]}}`,
	} {
		f.Add([]byte(s))
	}
	type message struct {
		Result struct{ Tools json.RawMessage }
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if mayListTools(msg) {
			return
		}
		var one message
		if json.Unmarshal(msg, &one) == nil && one.Result.Tools != nil {
			t.Fatalf("encoding/json finds tools in %q, which is left unread", msg)
		}
		var many []message
		if json.Unmarshal(msg, &many) == nil {
			for _, m := range many {
				if m.Result.Tools != nil {
					t.Fatalf("encoding/json finds tools in %q, which is left unread", msg)
				}
			}
		}
		root, err := parseJSON(msg, true)
		if err != nil {
			return
		}
		messages := []*jvalue{root}
		if root.kind == jArray {
			messages = root.elems
		}
		for i, m := range messages {
			if tools, _ := listedTools(m, i, ListResponse{}); tools != nil {
				t.Fatalf("the strict reader finds tools in %q, which is left unread", msg)
			}
		}
	})
}

// A result that names a tool twice tells keep so for each of its entries,
// whatever their order and even when both are the same definition; a
// name listed once is not flagged, in a short list and in a long one.
func TestFilterToolsListNamedTwice(t *testing.T) {
	l := ListResponse{Only: true}
	for _, tc := range []struct {
		tools string
		twice map[string]bool
	}{
		{`[{"name":"a","description":"new"},{"name":"b"},{"name":"a"}]`, map[string]bool{"a": true}},
		{`[{"name":"a"},{"name":"a","description":"new"}]`, map[string]bool{"a": true}},
		{`[{"name":"a"},{"name":"a"},{"name":"b"},{"name":"b"}]`, map[string]bool{"a": true, "b": true}},
		{`[{"name":"a"},{"name":"b"}]`, map[string]bool{}},
		{longList(40, "t7"), map[string]bool{"t7": true}},
		{longList(40, ""), map[string]bool{}},
	} {
		msg := `{"jsonrpc":"2.0","id":1,"result":{"tools":` + tc.tools + `}}`
		got := map[string]bool{}
		calls := 0
		_, removed, err := FilterToolsList([]byte(msg), l, func(name string, _ []byte, twice bool) bool {
			calls++
			if twice {
				got[name] = true
				return false
			}
			if tc.twice[name] {
				t.Errorf("%s: an entry of %s was given twice=false", tc.tools, name)
			}
			return true
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.tools, err)
		}
		if len(got) != len(tc.twice) {
			t.Errorf("%s: named twice %v, want %v", tc.tools, got, tc.twice)
		}
		for name := range tc.twice {
			if !got[name] {
				t.Errorf("%s: %s not flagged", tc.tools, name)
			}
		}
		if want := strings.Count(tc.tools, `"name"`); calls != want {
			t.Errorf("%s: keep called %d times, want %d", tc.tools, calls, want)
		}
		if len(tc.twice) > 0 && removed == 0 {
			t.Errorf("%s: nothing removed", tc.tools)
		}
	}
}

// longList is a tools array of n tools t0…, with again listed a second
// time at its end unless it is "".
func longList(n int, again string) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name":"t%d"}`, i)
	}
	if again != "" {
		fmt.Fprintf(&b, `,{"name":%q}`, again)
	}
	return b.String() + "]"
}
