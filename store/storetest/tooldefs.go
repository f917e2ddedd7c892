package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

func toolDefs(t *testing.T, s *store.Store, f store.ToolDefinitionFilter) []store.ToolDefinition {
	t.Helper()
	list, err := s.ListToolDefinitions(ctx(t), f)
	return must(t, list, err, "ListToolDefinitions(%+v)", f)
}

// fp is a fingerprint made of one repeated hex digit.
func fp(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

// defString shows a definition's key, times and proxy, for comparing
// lists.
func defString(d store.ToolDefinition) string {
	return fmt.Sprintf("%s %s:%d%s %s %s def=%q first=%s last=%s proxy=%s", d.Sandbox, d.Host, d.Port, d.Path, d.Tool, d.Fingerprint,
		d.Definition, d.FirstSeen.UTC().Format("2006-01-02T15:04:05.000000Z"), d.LastSeen.UTC().Format("2006-01-02T15:04:05.000000Z"), d.ProxyID)
}

func wantDefs(t *testing.T, what string, got, want []store.ToolDefinition) {
	t.Helper()
	gs, ws := make([]string, len(got)), make([]string, len(want))
	for i, d := range got {
		gs[i] = defString(d)
		if !d.FirstSeen.IsZero() && (d.FirstSeen.Location().String() != "UTC" || d.LastSeen.Location().String() != "UTC") {
			t.Errorf("%s: %d: times not in UTC: %v, %v", what, i, d.FirstSeen, d.LastSeen)
		}
	}
	for i, d := range want {
		ws[i] = defString(d)
	}
	if !slices.Equal(gs, ws) {
		t.Errorf("%s:\n got %s\nwant %s", what, strings.Join(gs, "\n     "), strings.Join(ws, "\n     "))
	}
}

// Each distinct definition is kept once per sandbox, endpoint and tool:
// a report of it again keeps the earliest first seen and moves the last
// seen (and its proxy) forward only; the list is ordered by endpoint and
// tool, each tool's newest first; sandboxes that do not exist are
// skipped, and a deleted sandbox's definitions go with it.
func testToolDefinitions(t *testing.T, s *store.Store) {
	MustCreate(t, s, "box", false)
	MustCreate(t, s, "other", false)
	if n, err := s.RecordToolDefinitions(ctx(t), nil); n != 0 || err != nil {
		t.Errorf("RecordToolDefinitions(none) = %d, %v", n, err)
	}
	def := func(sandbox, host, path, tool string, f string, first, last int, proxy string) store.ToolDefinition {
		d := store.ToolDefinition{Sandbox: sandbox, Host: host, Port: 443, Path: path, Tool: tool, Fingerprint: f,
			FirstSeen: usec(2030, first), LastSeen: usec(2030, last), ProxyID: proxy}
		if f != "" {
			d.Definition = []byte(`{"name":"` + tool + `","description":"v` + f[7:8] + ` ü"}`)
		}
		return d
	}
	a1 := def("box", "b.example.com", "/mcp", "lookup", fp('a'), 1, 1, "p1")
	b1 := def("box", "b.example.com", "/mcp", "lookup", fp('b'), 2, 2, "p1")
	c1 := def("box", "a.example.com", "/mcp", "zeta", fp('c'), 3, 3, "p2")
	d1 := def("box", "b.example.com", "/mcp", "alpha", "", 4, 4, "p2") // not canonicalisable: no fingerprint
	d1.Definition = []byte(`{"name":"alpha","x":1,"x":2}`)
	big := def("box", "b.example.com", "/v2", "lookup", fp('a'), 5, 5, "p1") // another path: another endpoint
	big.Definition = nil                                                     // over the bound at the proxy
	ghost := def("gone", "b.example.com", "/mcp", "lookup", fp('a'), 1, 1, "p1")
	o1 := def("other", "b.example.com", "/mcp", "lookup", fp('a'), 9, 9, "p9")
	n, err := s.RecordToolDefinitions(ctx(t), []store.ToolDefinition{a1, b1, c1, d1, big, ghost, o1})
	if must(t, n, err, "RecordToolDefinitions") != 6 {
		t.Errorf("RecordToolDefinitions stored %d, want 6 (the unknown sandbox skipped)", n)
	}
	wantDefs(t, "box", toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "box"}), []store.ToolDefinition{c1, d1, b1, a1, big})
	wantDefs(t, "other", toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "other"}), []store.ToolDefinition{o1})
	wantDefs(t, "gone", toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "gone"}), nil)
	wantDefs(t, "by fingerprint", toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "box", Fingerprint: fp('a')}), []store.ToolDefinition{a1, big})

	// The tool went back to a (reported by another proxy), then an old
	// report of b arrives late, with a definition for big at last.
	a2 := def("box", "b.example.com", "/mcp", "lookup", fp('a'), 7, 7, "p3")
	b0 := def("box", "b.example.com", "/mcp", "lookup", fp('b'), 0, 0, "p4")
	big2 := def("box", "b.example.com", "/v2", "lookup", fp('a'), 6, 6, "p5")
	if n, err := s.RecordToolDefinitions(ctx(t), []store.ToolDefinition{a2, b0, big2}); must(t, n, err, "RecordToolDefinitions again") != 3 {
		t.Errorf("RecordToolDefinitions again stored %d, want 3", n)
	}
	a1.LastSeen, a1.ProxyID = a2.LastSeen, "p3"
	b1.FirstSeen = b0.FirstSeen // last seen and proxy stay: the report is older
	big.LastSeen, big.ProxyID, big.Definition = big2.LastSeen, "p5", big2.Definition
	wantDefs(t, "box after more reports", toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "box"}), []store.ToolDefinition{c1, d1, a1, b1, big})

	must(t, struct{}{}, s.DeleteSandbox(ctx(t), "box", "alice"), "DeleteSandbox")
	wantDefs(t, "deleted box", toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "box"}), nil)
	wantDefs(t, "other after box deleted", toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "other"}), []store.ToolDefinition{o1})
}

// A sandbox keeps its MaxToolDefinitionsPerSandbox definitions seen last:
// a server that changes its tools on every list cannot fill the disk.
func testToolDefinitionsBound(t *testing.T, s *store.Store) {
	MustCreate(t, s, "box", false)
	MustCreate(t, s, "other", false)
	const extra = 5
	max := store.MaxToolDefinitionsPerSandbox
	defs := make([]store.ToolDefinition, 0, max+extra)
	for i := range max + extra {
		defs = append(defs, store.ToolDefinition{Sandbox: "box", Host: "m.example.com", Port: 443, Path: "/mcp", Tool: "t",
			Fingerprint: fmt.Sprintf("sha256:%064x", i), FirstSeen: usec(2030, i), LastSeen: usec(2030, i), ProxyID: "p"})
	}
	// The oldest come last: what is kept depends on when they were seen,
	// not on the order of the reports.
	slices.Reverse(defs)
	keep := store.ToolDefinition{Sandbox: "other", Host: "m.example.com", Port: 443, Path: "/mcp", Tool: "t",
		Fingerprint: fp('0'), FirstSeen: usec(2001, 0), LastSeen: usec(2001, 0), ProxyID: "p"}
	n, err := s.RecordToolDefinitions(ctx(t), append(defs, keep))
	must(t, n, err, "RecordToolDefinitions")
	got := toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "box"})
	if len(got) != max {
		t.Fatalf("box keeps %d definitions, want %d", len(got), max)
	}
	wantDefs(t, "box's newest and oldest kept", []store.ToolDefinition{got[0], got[max-1]}, []store.ToolDefinition{defs[0], defs[max-1]})
	wantDefs(t, "other sandbox untouched", toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "other"}), []store.ToolDefinition{keep})
}

// Definitions the schema cannot hold are refused before anything is
// stored: one bad definition refuses the whole call.
func testToolDefinitionsInvalid(t *testing.T, s *store.Store) {
	MustCreate(t, s, "box", false)
	good := store.ToolDefinition{Sandbox: "box", Host: "m.example.com", Port: 443, Path: "/mcp", Tool: "t",
		Fingerprint: fp('a'), FirstSeen: usec(2030, 0), LastSeen: usec(2030, 1), ProxyID: "p"}
	for what, change := range map[string]func(d *store.ToolDefinition){
		"empty sandbox":     func(d *store.ToolDefinition) { d.Sandbox = "" },
		"empty proxy":       func(d *store.ToolDefinition) { d.ProxyID = "" },
		"empty tool":        func(d *store.ToolDefinition) { d.Tool = "" },
		"port 0":            func(d *store.ToolDefinition) { d.Port = 0 },
		"port 65536":        func(d *store.ToolDefinition) { d.Port = 65536 },
		"no first seen":     func(d *store.ToolDefinition) { d.FirstSeen = time.Time{} },
		"last before first": func(d *store.ToolDefinition) { d.LastSeen = d.FirstSeen.Add(-1e3) },
		"definition over 64 KiB": func(d *store.ToolDefinition) {
			d.Definition = []byte(`"` + strings.Repeat("x", store.MaxToolDefinitionBytes) + `"`)
		},
	} {
		bad := good
		change(&bad)
		if n, err := s.RecordToolDefinitions(ctx(t), []store.ToolDefinition{good, bad}); err == nil {
			t.Errorf("%s: stored %d", what, n)
		}
	}
	wantDefs(t, "after refusals", toolDefs(t, s, store.ToolDefinitionFilter{Sandbox: "box"}), nil)
}
