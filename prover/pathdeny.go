package prover

import "github.com/portcullis-dev/portcullis/policy"

// widePath is policy.MatchDenyPath as an NFA on the strings of the path
// domains: MatchDenyGlob ignoring ASCII case, on the path itself, on it
// with encoded slashes decoded, and on each of those with each segment's
// trailing dots dropped. (The readings that strip `%3B` parameters or fold
// non-ASCII letters change only percent-escapes the path domains do not
// hold; see doc.go.) The decoded readings are built only for a domain
// with encoded slashes: elsewhere they are the path itself. A glob's
// `{a,b}` alternatives (policy.ExpandDenyPathGlob) are a union.
func widePath(pat string, encodedSlashes bool) *nfa {
	alts, ok := policy.ExpandDenyPathGlob(pat)
	if !ok {
		return emptyNFA()
	}
	wide := wideGlob(alts[0])
	if len(alts) > 1 {
		parts := make([]*nfa, len(alts))
		for i, a := range alts {
			parts[i] = wideGlob(a)
		}
		wide = union(parts...)
	}
	w := foldCase(wide)
	t := trimmedDots(w)
	if !encodedSlashes {
		return union(w, t)
	}
	return union(w, t, decodedSlashes(w), decodedSlashes(t))
}

// foldCase builds the NFA of the strings x accepts in some ASCII case.
func foldCase(x *nfa) *nfa {
	a := &nfa{start: x.start}
	for range x.trans {
		a.add()
	}
	for s := range x.trans {
		for _, e := range x.trans[s] {
			p := e.pred
			a.trans[s] = append(a.trans[s], edge{func(b byte) bool { return p(b) || p(policy.SwapCase(b)) }, e.to})
		}
		a.eps[s] = append(a.eps[s], x.eps[s]...)
		a.accept[s] = x.accept[s]
	}
	return a
}

// trimmedDots builds the NFA of { t : x accepts t with the trailing dots
// of every segment that has something besides dots dropped }. Four copies
// of x, by what the current segment has shown:
//
//	lead — only dots, or nothing: a dot is kept (a segment of dots stays);
//	body — something besides dots, last byte not a dot being dropped;
//	kept — a run of dots x reads, which must end before a byte other
//	       than '/' (else it would be trailing, so dropped);
//	drop — a run of trailing dots x does not read, which must end at '/'
//	       or at the end.
func trimmedDots(x *nfa) *nfa {
	const (
		lead = iota
		body
		kept
		drop
	)
	n := len(x.trans)
	a := &nfa{}
	for range 4 * n {
		a.add()
	}
	id := func(mode, s int) int { return mode*n + s }
	a.start = id(lead, x.start)
	isDot := func(b byte) bool { return b == '.' }
	isSlash := func(b byte) bool { return b == '/' }
	other := func(b byte) bool { return b != '.' && b != '/' }
	and := func(p, q func(byte) bool) func(byte) bool { return func(b byte) bool { return p(b) && q(b) } }
	for s := range x.trans {
		for m := range 4 {
			for _, t := range x.eps[s] {
				a.eps[id(m, s)] = append(a.eps[id(m, s)], id(m, t))
			}
		}
		for _, e := range x.trans[s] {
			add := func(from int, on func(byte) bool, to int) {
				a.trans[id(from, s)] = append(a.trans[id(from, s)], edge{and(e.pred, on), id(to, e.to)})
			}
			add(lead, isDot, lead)
			add(lead, isSlash, lead)
			add(lead, other, body)
			add(body, isDot, kept)
			add(body, isSlash, lead)
			add(body, other, body)
			add(kept, isDot, kept)
			add(kept, other, body)
			add(drop, isSlash, lead)
		}
		a.trans[id(body, s)] = append(a.trans[id(body, s)], edge{isDot, id(drop, s)})
		a.trans[id(drop, s)] = append(a.trans[id(drop, s)], edge{isDot, id(drop, s)})
		for _, m := range []int{lead, body, drop} {
			a.accept[id(m, s)] = x.accept[s]
		}
	}
	return a
}

// decodedSlashes builds the NFA of { t : x accepts t with every "%2F"
// read as '/' and runs of '/' collapsed to one }. Copies of x by whether
// the last byte x read was '/' (then another '/' is skipped) and by the
// progress through "%2F" ('%' appears in the path domain only there).
func decodedSlashes(x *nfa) *nfa {
	const (
		other = iota // x's last byte was not '/' (or x read nothing)
		slash        // x's last byte was '/'
		pct          // after '%' (+ mode: other or slash)
		pct2         // after "%2" (+ mode)
	)
	n := len(x.trans)
	a := &nfa{}
	for range 6 * n {
		a.add()
	}
	// ids: other, slash; pct+other, pct+slash; pct2+other, pct2+slash.
	id := func(stage, mode, s int) int {
		if stage < pct {
			return stage*n + s
		}
		return (2+2*(stage-pct)+mode)*n + s
	}
	a.start = id(other, 0, x.start)
	is := func(c byte) func(byte) bool { return func(b byte) bool { return b == c } }
	notPctSlash := func(b byte) bool { return b != '%' && b != '/' }
	and := func(p, q func(byte) bool) func(byte) bool { return func(b byte) bool { return p(b) && q(b) } }
	for s := range x.trans {
		for _, c := range [][2]int{{other, 0}, {slash, 0}, {pct, other}, {pct, slash}, {pct2, other}, {pct2, slash}} {
			for _, t := range x.eps[s] {
				a.eps[id(c[0], c[1], s)] = append(a.eps[id(c[0], c[1], s)], id(c[0], c[1], t))
			}
		}
		for _, e := range x.trans[s] {
			for _, m := range []int{other, slash} {
				from := id(m, 0, s)
				a.trans[from] = append(a.trans[from], edge{and(e.pred, notPctSlash), id(other, 0, e.to)})
			}
			a.trans[id(other, 0, s)] = append(a.trans[id(other, 0, s)], edge{and(e.pred, is('/')), id(slash, 0, e.to)})
			if e.pred('/') {
				a.trans[id(pct2, other, s)] = append(a.trans[id(pct2, other, s)], edge{is('F'), id(slash, 0, e.to)})
			}
		}
		// A '/' or "%2F" right after a '/' is collapsed: x reads nothing.
		a.trans[id(slash, 0, s)] = append(a.trans[id(slash, 0, s)], edge{is('/'), id(slash, 0, s)})
		a.trans[id(pct2, slash, s)] = append(a.trans[id(pct2, slash, s)], edge{is('F'), id(slash, 0, s)})
		for _, m := range []int{other, slash} {
			a.trans[id(m, 0, s)] = append(a.trans[id(m, 0, s)], edge{is('%'), id(pct, m, s)})
			a.trans[id(pct, m, s)] = append(a.trans[id(pct, m, s)], edge{is('2'), id(pct2, m, s)})
			a.accept[id(m, 0, s)] = x.accept[s]
		}
	}
	return a
}
