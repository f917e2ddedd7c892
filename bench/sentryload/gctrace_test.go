package main

import "testing"

func TestParseGCTrace(t *testing.T) {
	for _, tc := range []struct {
		line string
		live int
		ok   bool
	}{
		{"gc 12 @3.101s 2%: 0.021+1.5+0.010 ms clock, 0.043+0.31/1.2/0.44+0.021 ms cpu, 40->41->21 MB, 42 MB goal, 0 MB stacks, 0 MB globals, 2 P", 21, true},
		{"gc 1 @0.005s 3%: 0.010+0.50+0.002 ms clock, 0.020+0.1/0.2/0+0.005 ms cpu, 3->3->0 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)", 0, true},
		{"gc 7 @1.0s 1%: 0.01+1+0.01 ms clock, 0.02+0/1/0+0.02 ms cpu, 150->160->117 MB, 234 MB goal, 0 MB stacks, 0 MB globals, 2 P", 117, true},
		// The rest of a line a log line interrupted.
		{"0.3/1.2/0.4+0.02 ms cpu, 40->41->21 MB, 42 MB goal, 0 MB stacks, 0 MB globals, 2 P", 21, true},
		{`{"level":"INFO","msg":"gc 3 things"}`, 0, false},
		{"gc 2 @0.1s 1%: garbled", 0, false},
	} {
		live, ok := parseGCTrace(tc.line)
		if live != tc.live || ok != tc.ok {
			t.Errorf("parseGCTrace(%q) = %d, %v; want %d, %v", tc.line, live, ok, tc.live, tc.ok)
		}
	}
}
