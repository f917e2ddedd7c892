package decision

import (
	"fmt"
	"slices"
	"strings"
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
	if due := s.Due(t0.Add(SummaryWindow - time.Millisecond)); len(due) != 0 {
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
	if due := s.Close(); len(due) != 0 {
		t.Fatalf("due = %+v; want none (no denial held back since)", due)
	}

	// A flood of many kinds: SummaryTotal kept in all (and SummaryNew new
	// kinds), the rest summarised.
	s = NewSummarizer()
	kept = 0
	const kinds = 400
	for i := range 15 * kinds {
		if keep, _ := s.Admit(deny(i%1000, fmt.Sprint("h", i%kinds))); keep {
			kept++
		}
	}
	var summarised int64
	for _, r := range s.Close() {
		summarised += r.Summary.Count
	}
	// SummaryTotal, and the first denial of SummaryNew kinds more.
	if kept != SummaryTotal+SummaryNew || int64(kept)+summarised != 15*kinds {
		t.Fatalf("many kinds: %d kept, %d summarised; want %d kept and %d in all", kept, summarised, SummaryTotal+SummaryNew, 15*kinds)
	}
}

// A flood of junk kinds does not hide the denial of a new kind: kinds
// whose denials were all kept hold no summary slot, the first denial of a
// kind new in the window is kept from its own budget, and past every
// budget the shared summary still names a sample of what it holds.
func TestSummarizerNewKindAfterJunk(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	exfil := Record{Sandbox: "s", Host: "exfil.attacker.example", Port: 443, Binary: "/usr/bin/curl", Path: "/upload",
		Decision: Deny, DenialID: "dn_exfil", Reason: "no rule for exfil.attacker.example"}
	// run sends one denial each of n junk kinds, then exfil, and returns
	// the records kept one by one and the summaries.
	run := func(n int) (kept, sums []Record) {
		s := NewSummarizer()
		out := func(keep bool, due []Record, r Record) {
			sums = append(sums, due...)
			if keep {
				kept = append(kept, r)
			}
		}
		for i := range n {
			r := Record{Time: t0.Add(time.Duration(i) * time.Microsecond), Sandbox: "s", Host: fmt.Sprint("junk", i, ".example"),
				Port: 443, Decision: Deny, DenialID: fmt.Sprint("dn_", i)}
			keep, due := s.Admit(r)
			out(keep, due, r)
		}
		r := exfil
		r.Time = t0.Add(time.Duration(n) * time.Microsecond)
		keep, due := s.Admit(r)
		out(keep, due, r)
		return kept, append(sums, s.Close()...)
	}
	isExfil := func(r Record) bool { return r.DenialID == "dn_exfil" }

	// The total budget spent by junk: exfil, new in the window, is kept.
	kept, _ := run(SummaryTotal)
	if !slices.ContainsFunc(kept, isExfil) {
		t.Errorf("after %d junk kinds the new kind's denial was not kept", SummaryTotal)
	}
	// Junk that spends the total and the new-kind budgets and fills the
	// summary slots but for one (the kinds kept one by one hold none):
	// exfil gets a summary of its own, host and binary named.
	for _, n := range []int{SummaryKinds, SummaryTotal + SummaryNew + SummaryKinds - 1} {
		kept, sums := run(n)
		if len(kept) != SummaryTotal+SummaryNew {
			t.Errorf("%d junk kinds: %d kept; want %d", n, len(kept), SummaryTotal+SummaryNew)
		}
		i := slices.IndexFunc(sums, func(r Record) bool { return r.Summary.FirstDenialID == "dn_exfil" })
		if i < 0 || sums[i].Host != exfil.Host || sums[i].Binary != exfil.Binary || sums[i].Summary.Count != 1 {
			t.Errorf("%d junk kinds: exfil's denial not in a summary of its own: %+v", n, sums)
		}
	}
	// Every slot taken too: the shared summary names exfil in its sample.
	n := SummaryTotal + SummaryNew + SummaryKinds
	_, sums := run(n)
	i := slices.IndexFunc(sums, func(r Record) bool { return r.Summary.LastDenialID == "dn_exfil" })
	if i < 0 || sums[i].Host != "" || !strings.Contains(sums[i].Reason, "exfil.attacker.example:443 by /usr/bin/curl ×1") {
		t.Fatalf("%d junk kinds: exfil not named by the shared summary: %+v", n, sums)
	}
	if len(sums[i].Reason) > TextLimit {
		t.Errorf("shared summary's reason is %d bytes; want at most %d", len(sums[i].Reason), TextLimit)
	}
	// Its sample is bounded: past SummarySample kinds, only counted.
	_, sums = run(n + SummarySample)
	i = slices.IndexFunc(sums, func(r Record) bool { return r.Summary.LastDenialID == "dn_exfil" })
	if i < 0 || sums[i].Summary.Count != SummarySample+1 || strings.Contains(sums[i].Reason, "exfil") {
		t.Fatalf("shared summary past its sample: %+v", sums)
	}
}

// After Close (the proxy's last flush) denials are kept one by one: none
// is folded into a summary nobody would emit.
func TestSummarizerClose(t *testing.T) {
	s := NewSummarizer()
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	deny := Record{Time: t0, Sandbox: "s", Host: "flood.example.com", Port: 443, Decision: Deny}
	for range SummaryPerKind + 5 {
		s.Admit(deny)
	}
	if sums := s.Close(); len(sums) != 1 || sums[0].Summary.Count != 5 {
		t.Fatalf("Close = %+v; want one summary of 5", sums)
	}
	for i := range SummaryPerKind + 3 {
		if keep, due := s.Admit(deny); !keep || len(due) != 0 {
			t.Fatalf("denial %d after Close: keep %v, due %+v; want kept", i, keep, due)
		}
	}
	if sums := s.Close(); len(sums) != 0 {
		t.Fatalf("second Close = %+v; want none", sums)
	}
	if due := s.Due(t0.Add(time.Hour)); len(due) != 0 {
		t.Fatalf("Due after Close = %+v; want none", due)
	}
}
