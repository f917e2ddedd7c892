package decision

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	record "github.com/portcullis-dev/portcullis/decision"
)

// The Summarizer's defaults.
const (
	// SummaryWindow: each kind's budget of records kept one by one is
	// renewed, and its summary (if any) emitted, this long after the
	// window's first denial.
	SummaryWindow = 10 * time.Second
	// SummaryPerKind denials of a kind are kept one by one in each window.
	SummaryPerKind = 20
	// SummaryTotal denials of all kinds together are kept one by one in
	// each window (of the first of them): a flood of many kinds is bounded
	// too.
	SummaryTotal = 200
	// SummaryNew: past SummaryTotal, the first denial of a kind not seen
	// in its window is still kept one by one, SummaryNew of them in each
	// window of all kinds, so a new destination shows up on its own.
	SummaryNew = 50
	// SummaryKinds bounds the kinds with a summary pending at once (kinds
	// whose denials were all kept hold none); denials of further kinds
	// share one summary per sandbox and decision.
	SummaryKinds = 256
	// SummarySample kinds of a shared summary are named in its reason,
	// each with its count: host and port, tool or MCP method, binary.
	SummarySample = 8
)

// keptKinds bounds the kinds followed whose denials were all kept. Only a
// kept denial adds one, so it holds those of the last few windows; past
// it those of ended windows are forgotten, then all of them (each may
// then be kept SummaryPerKind times more, within SummaryTotal).
const keptKinds = 4 * (SummaryTotal + SummaryNew)

// sampleLabel is the most bytes of a kind's label in a shared summary's
// sample, so that SummarySample of them fit in TextLimit.
const sampleLabel = 48

// Summarizer keeps a flood of similar denials from crowding out the
// other records in the ring, the file and the shipper: in each window of
// a kind, its first SummaryPerKind denials are kept one by one (and no
// more than SummaryTotal of all kinds in a window, but for the first
// denial of SummaryNew kinds new in their window) and the rest are
// counted into one summary record a kind, emitted when the window ends.
// Allowed and audited records always pass: they are never folded nor
// held. It is safe for concurrent use.
//
// A sandbox that wants one denial (say of a new destination) hidden among
// others must, within its window, have SummaryTotal denials kept, then
// SummaryNew of new kinds, then fill the SummaryKinds summary slots with
// kinds denied past those budgets, then the shared summary's sample with
// SummarySample kinds more: some 500 denials (of at least 300 kinds) in
// 10 s, again in every window. Even then the denial is counted in the shared
// summary, whose count shows the flood.
type Summarizer struct {
	mu      sync.Mutex
	kinds   map[record.Kind]*window // kept-only kinds and those with a summary
	folding int                     // the kinds with a summary, at most SummaryKinds
	shared  map[record.Kind]*window // past SummaryKinds, by sandbox and decision
	all     window                  // kept: of SummaryTotal in this window of all kinds
	fresh   int                     // of SummaryNew in this window of all kinds
	closed  bool                    // after Close every denial is kept
}

type window struct {
	start  time.Time
	kept   int
	sum    *Record   // nil while every denial of the window was kept
	sample []sampled // a shared summary's first SummarySample kinds
}

type sampled struct {
	label string
	n     int64
}

// NewSummarizer returns an empty summarizer.
func NewSummarizer() *Summarizer {
	return &Summarizer{kinds: make(map[record.Kind]*window), shared: make(map[record.Kind]*window)}
}

// Folds reports whether a record of this verdict may be folded into a
// summary (record.Folds): a denial, never an allowed or audited request.
func Folds(verdict string) bool { return record.Folds(verdict) }

// Admit returns whether r is kept as it is; if not, it was counted into
// its kind's summary. due are the summaries whose window r's time ended,
// to emit before r.
func (s *Summarizer) Admit(r Record) (keep bool, due []Record) {
	if !Folds(r.Decision) || r.Summary != nil {
		return true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return true, nil
	}
	if r.Time.Sub(s.all.start) >= SummaryWindow {
		s.all, s.fresh = window{start: r.Time}, 0
	}
	k := record.KindOf(&r)
	w := s.kinds[k]
	if w != nil && r.Time.Sub(w.start) >= SummaryWindow {
		due = s.end(s.kinds, k, w, due)
		w = nil
	}
	switch {
	case w == nil && (s.all.kept < SummaryTotal || s.fresh < SummaryNew):
		if s.all.kept < SummaryTotal {
			s.all.kept++
		} else {
			s.fresh++
		}
		s.forget(r.Time)
		s.kinds[k] = &window{start: r.Time, kept: 1}
		return true, due
	case w != nil && w.kept < SummaryPerKind && s.all.kept < SummaryTotal:
		w.kept++
		s.all.kept++
		return true, due
	}
	if w == nil || w.sum == nil {
		if s.folding >= SummaryKinds {
			return false, s.share(r, due)
		}
		if w == nil {
			w = &window{start: r.Time}
			s.kinds[k] = w
		}
		w.sum = summaryOf(k, r)
		w.sum.Reason = r.Reason // the first one's: what the kind was denied for
		s.folding++
	}
	count(w.sum, r)
	return false, due
}

// share counts r into the summary its sandbox and decision share past
// SummaryKinds, and r's kind into its sample.
func (s *Summarizer) share(r Record, due []Record) []Record {
	k := record.Kind{Sandbox: r.Sandbox, Decision: r.Decision}
	w := s.shared[k]
	if w != nil && r.Time.Sub(w.start) >= SummaryWindow {
		due = s.end(s.shared, k, w, due)
		w = nil
	}
	if w == nil {
		w = &window{start: r.Time, sum: summaryOf(k, r)}
		s.shared[k] = w
	}
	count(w.sum, r)
	l := labelOf(r)
	if i := slices.IndexFunc(w.sample, func(x sampled) bool { return x.label == l }); i >= 0 {
		w.sample[i].n++
	} else if len(w.sample) < SummarySample {
		w.sample = append(w.sample, sampled{label: l, n: 1})
	}
	return due
}

// summaryOf starts the summary of kind k at r, its first record.
func summaryOf(k record.Kind, r Record) *Record {
	sum := k.Of()
	sum.Time, sum.PolicyVersion = r.Time, r.PolicyVersion
	sum.Summary = &Summary{FirstDenialID: r.DenialID}
	return &sum
}

func count(sum *Record, r Record) {
	sum.Summary.Count++
	sum.Summary.Last = r.Time
	sum.Summary.LastDenialID = r.DenialID
}

// labelOf names r's kind in a shared summary's sample: host:port, tool
// (or MCP method) and binary, cut to sampleLabel bytes.
func labelOf(r Record) string {
	var parts []string
	if r.Host != "" {
		parts = append(parts, net.JoinHostPort(r.Host, strconv.Itoa(r.Port)))
	}
	if r.Tool != "" {
		parts = append(parts, "tool "+r.Tool)
	} else if r.MCPMethod != "" {
		parts = append(parts, "mcp "+r.MCPMethod)
	}
	if r.Binary != "" {
		parts = append(parts, "by "+r.Binary)
	}
	l := strings.Join(parts, " ")
	if l == "" {
		l = "?"
	}
	if len(l) > sampleLabel {
		l = cutUTF8(l, sampleLabel)
	}
	return l
}

// end appends w's summary (if any) to due and forgets k's window.
func (s *Summarizer) end(m map[record.Kind]*window, k record.Kind, w *window, due []Record) []Record {
	delete(m, k)
	if w.sum == nil {
		return due
	}
	if w.sample != nil {
		var b strings.Builder
		b.WriteString("more kinds than summary slots, among them:")
		var n int64
		for _, x := range w.sample {
			fmt.Fprintf(&b, " %s ×%d;", x.label, x.n)
			n += x.n
		}
		if n < w.sum.Summary.Count {
			fmt.Fprintf(&b, " %d more", w.sum.Summary.Count-n)
		}
		w.sum.Reason = strings.TrimSuffix(b.String(), ";")
		if len(w.sum.Reason) > TextLimit {
			w.sum.Reason = cutUTF8(w.sum.Reason, TextLimit)
		}
	} else {
		s.folding--
	}
	return append(due, *w.sum)
}

// forget makes room for one more kind whose denials were all kept: past
// keptKinds (and SummaryKinds), it forgets those whose window ended by
// now, then, if that is not enough, all of them.
func (s *Summarizer) forget(now time.Time) {
	if len(s.kinds) < keptKinds+SummaryKinds {
		return
	}
	maps.DeleteFunc(s.kinds, func(_ record.Kind, w *window) bool { return w.sum == nil && now.Sub(w.start) >= SummaryWindow })
	if len(s.kinds) >= keptKinds+SummaryKinds {
		maps.DeleteFunc(s.kinds, func(_ record.Kind, w *window) bool { return w.sum == nil })
	}
}

// Due returns the summaries whose window has ended by now and forgets
// the windows that have.
func (s *Summarizer) Due(now time.Time) []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.due(func(w *window) bool { return now.Sub(w.start) >= SummaryWindow })
}

// Close returns every summary pending (the proxy is stopping): denials
// admitted after it are kept one by one, none is folded into a summary
// that would never be emitted.
func (s *Summarizer) Close() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.due(func(*window) bool { return true })
}

func (s *Summarizer) due(ended func(*window) bool) []Record {
	var due []Record
	for _, m := range []map[record.Kind]*window{s.kinds, s.shared} {
		for k, w := range m {
			if ended(w) {
				due = s.end(m, k, w, due)
			}
		}
	}
	slices.SortFunc(due, func(a, b Record) int { return a.Time.Compare(b.Time) })
	return due
}
