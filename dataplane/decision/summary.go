package decision

import (
	"slices"
	"sync"
	"time"
)

// Summary is what a summary record adds: how many denials of the record's
// kind it stands for, the last one's time (the record's Time is the
// first's), and the first and last of their denial ids.
type Summary struct {
	Count         int64     `json:"count"`
	Last          time.Time `json:"last"`
	FirstDenialID string    `json:"first_denial_id,omitempty"`
	LastDenialID  string    `json:"last_denial_id,omitempty"`
}

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
	// SummaryKinds bounds the kinds followed at once; denials of further
	// kinds share one kind per decision (only sandbox and decision set).
	SummaryKinds = 256
)

// Kind is what makes denials similar: the same sandbox, decision, binary,
// host and port, HTTP and MCP method, tool, entry, rule and reason code.
// The path, the reason text (which may quote the path), the time and the
// denial id may differ.
type Kind struct {
	Sandbox, Decision, Binary, Host string
	Port                            int
	HTTPMethod, MCPMethod, Tool     string
	Entry, Rule, ReasonCode         string
	VersionProbe                    bool
}

// KindOf returns r's kind.
func KindOf(r Record) Kind {
	return Kind{
		Sandbox: r.Sandbox, Decision: r.Decision, Binary: r.Binary, Host: r.Host, Port: r.Port,
		HTTPMethod: r.HTTPMethod, MCPMethod: r.MCPMethod, Tool: r.Tool, Entry: r.Entry, Rule: r.Rule,
		ReasonCode: r.ReasonCode, VersionProbe: r.VersionProbe,
	}
}

// Summarizer keeps a flood of similar denials from crowding out the
// other records in the ring, the file and the shipper: in each window of
// a kind, its first SummaryPerKind denials are kept one by one (and no
// more than SummaryTotal of all kinds in a window) and the rest are
// counted into one summary record a kind, emitted when the window ends. Allowed and audited records always pass: they are never folded
// nor held. It is safe for concurrent use.
type Summarizer struct {
	mu    sync.Mutex
	kinds map[Kind]*window
	all   window // the denials of every kind kept one by one
}

type window struct {
	start time.Time
	kept  int
	sum   *Record // nil while every denial of the window was kept
}

// NewSummarizer returns an empty summarizer.
func NewSummarizer() *Summarizer { return &Summarizer{kinds: make(map[Kind]*window)} }

// Folds reports whether a record of this decision may be folded into a
// summary: a denial (deny, rate_limited), never an allowed or audited
// request.
func Folds(decision string) bool { return decision != Allow && decision != Audit }

// Admit returns whether r is kept as it is; if not, it was counted into
// its kind's summary. due are the summaries whose window r's time ended,
// to emit before r.
func (s *Summarizer) Admit(r Record) (keep bool, due []Record) {
	if !Folds(r.Decision) || r.Summary != nil {
		return true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := KindOf(r)
	w := s.kinds[k]
	if w == nil && len(s.kinds) >= SummaryKinds {
		k = Kind{Sandbox: r.Sandbox, Decision: r.Decision}
		w = s.kinds[k]
	}
	if w != nil && r.Time.Sub(w.start) >= SummaryWindow {
		if w.sum != nil {
			due = append(due, *w.sum)
		}
		w = nil
	}
	if w == nil {
		w = &window{start: r.Time}
		s.kinds[k] = w
	}
	if r.Time.Sub(s.all.start) >= SummaryWindow {
		s.all = window{start: r.Time}
	}
	if w.kept < SummaryPerKind && s.all.kept < SummaryTotal {
		w.kept++
		s.all.kept++
		return true, due
	}
	if w.sum == nil {
		sum := Record{
			Time: r.Time, Sandbox: k.Sandbox, Decision: k.Decision, Binary: k.Binary, Host: k.Host, Port: k.Port,
			HTTPMethod: k.HTTPMethod, MCPMethod: k.MCPMethod, Tool: k.Tool, Entry: k.Entry, Rule: k.Rule,
			ReasonCode: k.ReasonCode, VersionProbe: k.VersionProbe, PolicyVersion: r.PolicyVersion,
			Summary: &Summary{FirstDenialID: r.DenialID},
		}
		if k == KindOf(r) {
			sum.Reason = r.Reason // the first one's: what the kind was denied for
		}
		w.sum = &sum
	}
	w.sum.Summary.Count++
	w.sum.Summary.Last = r.Time
	w.sum.Summary.LastDenialID = r.DenialID
	return false, due
}

// Due returns the summaries whose window has ended by now (all of them
// when all is set: the proxy is stopping) and forgets those windows.
func (s *Summarizer) Due(now time.Time, all bool) []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []Record
	for k, w := range s.kinds {
		if !all && now.Sub(w.start) < SummaryWindow {
			continue
		}
		if w.sum != nil {
			due = append(due, *w.sum)
		}
		delete(s.kinds, k)
	}
	slices.SortFunc(due, func(a, b Record) int { return a.Time.Compare(b.Time) })
	return due
}
