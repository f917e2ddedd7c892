package decision

import (
	"fmt"
	"testing"
	"time"
)

// In each window a kind keeps SummaryPerKind denials one by one and
// counts the rest into one summary, emitted when the window ends; allowed
// records and other kinds pass whatever the flood.
func TestSummarizer(t *testing.T) {
	s := NewSummarizer()
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	deny := func(i int, host string) Record {
		return Record{Time: t0.Add(time.Duration(i) * time.Millisecond), Sandbox: "s", Host: host, Port: 443, Path: fmt.Sprint("/", i),
			Decision: Deny, DenialID: fmt.Sprint("dn_", i), Reason: fmt.Sprint("no rule for /", i)}
	}
	kept := 0
	for i := range 600 {
		keep, due := s.Admit(deny(i, "flood.example.com"))
		if len(due) != 0 {
			t.Fatalf("denial %d: summaries due inside the window: %+v", i, due)
		}
		if keep {
			kept++
		}
		if keep, _ := s.Admit(Record{Time: t0, Host: "flood.example.com", Decision: Allow}); !keep {
			t.Fatalf("an allowed record was held back")
		}
	}
	if kept != SummaryPerKind {
		t.Fatalf("kept %d denials of the flood; want %d", kept, SummaryPerKind)
	}
	if keep, _ := s.Admit(deny(700, "other.example.com")); !keep {
		t.Fatal("a denial of another kind was held back")
	}
	if due := s.Due(t0.Add(SummaryWindow-time.Millisecond), false); len(due) != 0 {
		t.Fatalf("due before the window ended: %+v", due)
	}
	// The next denial of the kind after the window brings its summary.
	keep, due := s.Admit(deny(10_000, "flood.example.com"))
	if !keep || len(due) != 1 {
		t.Fatalf("after the window: keep %v, %d due; want kept and 1 due", keep, len(due))
	}
	sum := due[0]
	want := Summary{Count: 580, Last: deny(599, "").Time, FirstDenialID: "dn_20", LastDenialID: "dn_599"}
	if sum.Summary == nil || *sum.Summary != want || sum.Time != deny(20, "").Time || sum.Host != "flood.example.com" ||
		sum.Decision != Deny || sum.Path != "" || sum.DenialID != "" || sum.Reason != "no rule for /20" {
		t.Fatalf("summary = %+v %+v; want %+v", sum, sum.Summary, want)
	}
	if due := s.Due(t0.Add(time.Hour), true); len(due) != 0 {
		t.Fatalf("due = %+v; want none (no denial held back since)", due)
	}

	// A flood of many kinds: SummaryTotal kept in all, the rest summarised.
	s = NewSummarizer()
	kept = 0
	const kinds = 400
	for i := range 15 * kinds {
		if keep, _ := s.Admit(deny(i%1000, fmt.Sprint("h", i%kinds))); keep {
			kept++
		}
	}
	var summarised int64
	for _, r := range s.Due(t0.Add(time.Hour), true) {
		summarised += r.Summary.Count
	}
	if kept != SummaryTotal || int64(kept)+summarised != 15*kinds {
		t.Fatalf("many kinds: %d kept, %d summarised; want %d kept and %d in all", kept, summarised, SummaryTotal, 15*kinds)
	}
}
