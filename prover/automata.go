package prover

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/portcullis-dev/portcullis/policy"
)

// This file decides, exactly, which combinations of "matches / does not
// match" a finite set of patterns can realise on the strings of a domain,
// and constructs one witness string for each combination.
//
// Every pattern language of a policy used here (path, binary, method and
// tool globs in their narrow and wide readings, host patterns) is regular,
// so each is an NFA over bytes. The domain (canonical paths, clean
// absolute paths, DNS names, any string) is a DFA. Bytes that no
// automaton distinguishes are interchangeable, so the alphabet is split
// into equivalence classes and one byte stands for each. A breadth-first
// search of the product of the domain DFA with the subset construction of
// every NFA visits every reachable product state; the acceptance vector of
// a product state is the combination it realises. Since the state space is
// finite and fully explored, every realisable combination is found (and
// only realisable ones: each comes with its witness). This is the "split
// into atoms" step: no sampling.

// nfa is a small nondeterministic automaton over bytes with ε-moves.
type nfa struct {
	trans  [][]edge // per state
	eps    [][]int
	accept []bool
	start  int
}

type edge struct {
	pred func(byte) bool
	to   int
}

func (a *nfa) add() int {
	a.trans = append(a.trans, nil)
	a.eps = append(a.eps, nil)
	a.accept = append(a.accept, false)
	return len(a.trans) - 1
}

func (a *nfa) closure(set []int) []int {
	mark := make([]bool, len(a.trans))
	stack := make([]int, 0, len(set)+4)
	for _, s := range set {
		if !mark[s] {
			mark[s] = true
			stack = append(stack, s)
		}
	}
	for i := 0; i < len(stack); i++ {
		for _, t := range a.eps[stack[i]] {
			if !mark[t] {
				mark[t] = true
				stack = append(stack, t)
			}
		}
	}
	out := stack[:0:0]
	for s, m := range mark {
		if m {
			out = append(out, s)
		}
	}
	return out
}

func (a *nfa) step(set []int, c byte) []int {
	var next []int
	for _, s := range set {
		for _, e := range a.trans[s] {
			if e.pred(c) {
				next = append(next, e.to)
			}
		}
	}
	if len(next) == 0 {
		return nil
	}
	return a.closure(next)
}

func (a *nfa) accepts(set []int) bool {
	for _, s := range set {
		if a.accept[s] {
			return true
		}
	}
	return false
}

// empty is the automaton of the empty language (an invalid glob matches
// nothing).
func emptyNFA() *nfa {
	a := &nfa{}
	a.start = a.add()
	return a
}

// token is one element of a character pattern: a star or a one-byte
// predicate. It mirrors policy's glob tokens.
type token struct {
	star bool
	pred func(byte) bool
}

// charTokens compiles a character pattern with policy.CompileGlobChars,
// as policy.MatchGlob reads one segment or (wide) MatchDenyGlob a whole
// pattern. In a segment no token may consume `/` (the automaton crosses
// segments only on its own `/` edges); wide, `?` may.
func charTokens(pat string, wide bool) ([]token, bool) {
	ptoks, ok := policy.CompileGlobChars(pat)
	if !ok {
		return nil, false
	}
	toks := make([]token, len(ptoks))
	for i, t := range ptoks {
		switch {
		case t.Star:
			toks[i] = token{star: true}
		case wide:
			toks[i] = token{pred: t.Class}
		default:
			class := t.Class
			toks[i] = token{pred: func(b byte) bool { return b != '/' && class(b) }}
		}
	}
	return toks, true
}

// appendTokens adds a token chain from state `from`, star tokens looping
// on bytes that starOK accepts, and returns the last state.
func (a *nfa) appendTokens(from int, toks []token, starOK func(byte) bool) int {
	cur := from
	for _, t := range toks {
		next := a.add()
		if t.star {
			a.eps[cur] = append(a.eps[cur], next)
			a.trans[next] = append(a.trans[next], edge{starOK, next})
		} else {
			a.trans[cur] = append(a.trans[cur], edge{t.pred, next})
		}
		cur = next
	}
	return cur
}

// appendLiteral adds a chain matching exactly s from state `from` and
// returns the last state.
func (a *nfa) appendLiteral(from int, s string) int {
	cur := from
	for i := 0; i < len(s); i++ {
		next := a.add()
		a.trans[cur] = append(a.trans[cur], edge{isByte(s[i]), next})
		cur = next
	}
	return cur
}

func anyByte(byte) bool             { return true }
func notSlash(b byte) bool          { return b != '/' }
func isByte(c byte) func(byte) bool { return func(b byte) bool { return b == c } }

// narrowGlob is policy.MatchGlob as an NFA: segments split on `/`, `**`
// a whole segment matching zero or more segments.
func narrowGlob(pat string) *nfa {
	if policy.ValidGlob(pat) != nil {
		return emptyNFA()
	}
	segs := strings.Split(pat, "/")
	a := &nfa{}
	n := len(segs)
	begin := make([]int, n)
	end := make([]int, n)
	for i := range segs {
		begin[i] = a.add()
	}
	a.start = begin[0]
	for i, seg := range segs {
		if seg == "**" {
			end[i] = a.add()
			a.eps[begin[i]] = append(a.eps[begin[i]], end[i])
			a.trans[end[i]] = append(a.trans[end[i]], edge{anyByte, end[i]})
			continue
		}
		toks, ok := charTokens(seg, false)
		if !ok {
			return emptyNFA()
		}
		end[i] = a.appendTokens(begin[i], toks, notSlash)
	}
	// zero[i]: a `**` at i that matched no segment; the separators on both
	// sides collapse to one, so it continues like end[i] without its loop.
	zero := make([]int, n)
	for i := range segs {
		zero[i] = -1
		if segs[i] == "**" && i > 0 {
			zero[i] = a.add()
			a.eps[end[i-1]] = append(a.eps[end[i-1]], zero[i])
			if zero[i-1] >= 0 {
				a.eps[zero[i-1]] = append(a.eps[zero[i-1]], zero[i])
			}
		}
		// Also, right after a separator (or at the start), a `**` that
		// matches no segment hands over to the next segment directly.
		if segs[i] == "**" && i+1 < n {
			a.eps[begin[i]] = append(a.eps[begin[i]], begin[i+1])
		}
	}
	for i := range segs {
		for _, s := range []int{end[i], zero[i]} {
			if s < 0 {
				continue
			}
			if i+1 < n {
				a.trans[s] = append(a.trans[s], edge{isByte('/'), begin[i+1]})
			} else {
				a.accept[s] = true
			}
		}
	}
	return a
}

// charsGlob is OpenShell's reading (policy's matchChars): no segments,
// `*` and `?` cross `/`.
func charsGlob(pat string) *nfa {
	if policy.ValidGlob(pat) != nil {
		return emptyNFA()
	}
	toks, ok := charTokens(pat, true)
	if !ok {
		return emptyNFA()
	}
	a := &nfa{}
	a.start = a.add()
	a.accept[a.appendTokens(a.start, toks, anyByte)] = true
	return a
}

// union builds the NFA of L(x) ∪ L(y).
func union(parts ...*nfa) *nfa {
	a := &nfa{}
	a.start = a.add()
	for _, p := range parts {
		off := len(a.trans)
		for range p.trans {
			a.add()
		}
		for s := range p.trans {
			for _, e := range p.trans[s] {
				a.trans[off+s] = append(a.trans[off+s], edge{e.pred, off + e.to})
			}
			for _, t := range p.eps[s] {
				a.eps[off+s] = append(a.eps[off+s], off+t)
			}
			a.accept[off+s] = p.accept[s]
		}
		a.eps[a.start] = append(a.eps[a.start], off+p.start)
	}
	return a
}

// concatSlash builds the NFA of { t + "/" : t ∈ L(x), t ≠ "" }: two
// copies of x, the second entered by the first byte read, and a '/' from
// the second copy's accepting states to the only accepting state.
func concatSlash(x *nfa) *nfa {
	a := &nfa{}
	n := len(x.trans)
	for range 2*n + 1 {
		a.add()
	}
	final := 2 * n
	a.start = x.start
	for s := range x.trans {
		for _, e := range x.trans[s] {
			a.trans[s] = append(a.trans[s], edge{e.pred, n + e.to})
			a.trans[n+s] = append(a.trans[n+s], edge{e.pred, n + e.to})
		}
		for _, t := range x.eps[s] {
			a.eps[s] = append(a.eps[s], t)
			a.eps[n+s] = append(a.eps[n+s], n+t)
		}
		if x.accept[s] {
			a.trans[n+s] = append(a.trans[n+s], edge{isByte('/'), final})
		}
	}
	a.accept[final] = true
	return a
}

// wideGlob is policy.MatchDenyGlob as an NFA.
func wideGlob(pat string) *nfa {
	either := union(narrowGlob(pat), charsGlob(pat))
	return union(either, concatSlash(either))
}

// domain is a DFA over bytes given by a step function (-1 = dead) and an
// accepting predicate, with the bytes it may use.
type domain struct {
	start  int
	step   func(state int, c byte) int
	accept func(state int) bool
	bytes  []byte
	// special bytes the domain itself tells apart: each is its own class.
	special string
	maxLen  int
}

// The witnesses of a pattern list depend on nothing else, and a policy's
// patterns recur from proof to proof (the advisor proves every proposal
// against the same current policy and boundary), so they are remembered
// by dimension and pattern list (cached). The cache is bounded: when full
// it is emptied.
var patternCache struct {
	sync.Mutex
	m map[string]any
}

const patternCacheMax = 2048

// cached returns build(), remembered under kind and pats: build must
// depend on nothing else, and its result must never be modified.
func cached[T any](kind string, pats []string, build func() T) T {
	n := len(kind) + 1
	for _, p := range pats {
		n += len(p) + 4
	}
	kb := make([]byte, 0, n)
	kb = append(kb, kind...)
	kb = append(kb, 0)
	for _, p := range pats {
		kb = strconv.AppendInt(kb, int64(len(p)), 10)
		kb = append(kb, ':')
		kb = append(kb, p...)
	}
	key := string(kb)
	patternCache.Lock()
	v, ok := patternCache.m[key].(T)
	patternCache.Unlock()
	if ok {
		return v
	}
	v = build()
	patternCache.Lock()
	if patternCache.m == nil || len(patternCache.m) >= patternCacheMax {
		patternCache.m = map[string]any{}
	}
	patternCache.m[key] = v
	patternCache.Unlock()
	return v
}

// cachedWitnesses is witnesses(build()) for the patterns pats read as
// dimension kind (build must depend on nothing else), remembered. The
// result is the caller's own copy.
// The search is charged to m; one that runs out of budget aborts (see
// budget.go) and leaves nothing in the cache.
func cachedWitnesses(m *meter, kind string, pats []string, build func() (domain, []*nfa)) []string {
	return slices.Clone(cached(kind, pats, func() []string {
		dom, ms := build()
		return witnesses(m, dom, ms)
	}))
}

// witnesses explores the product of dom with every matcher and returns one
// shortest witness per realisable acceptance vector (of strings dom
// accepts).
//
// Each matcher is determinised lazily (dfa below): a product state is the
// domain state and one small id per matcher, the id of the matcher's
// ε-closed state set. Equal sets get equal ids, so the search visits
// exactly the product states of the subset construction, in breadth-first
// order, as a search keyed by the sets themselves would.
//
// The number of product states is exponential in the number of matchers
// in the worst case (n globs like `*a*b*c*` realise 2^n vectors), so the
// search is charged to m as it goes: each product state its size, each
// expansion its steps, each new matcher state its set and table row.
func witnesses(m *meter, dom domain, ms []*nfa) []string {
	defer m.release(m.mark())
	// Alphabet classes: bytes of the domain grouped by how every edge
	// predicate of every automaton (and the domain) treats them.
	var preds []func(byte) bool
	for _, m := range ms {
		for _, es := range m.trans {
			for _, e := range es {
				preds = append(preds, e.pred)
			}
		}
	}
	m.charge(stageWitness, len(preds)*len(dom.bytes)/8+1)
	groups := map[string]byte{}
	var reps []byte
	key := make([]byte, 0, len(preds)+1)
	for _, b := range dom.bytes {
		key = key[:0]
		for _, p := range preds {
			if p(b) {
				key = append(key, '1')
			} else {
				key = append(key, '0')
			}
		}
		// The domain itself distinguishes some bytes ('/', '.', …):
		// keep those apart by their own value.
		if strings.IndexByte(dom.special, b) >= 0 {
			key = append(key, b)
		}
		if _, ok := groups[string(key)]; !ok {
			groups[string(key)] = b
			reps = append(reps, b)
		}
	}
	dfas := make([]*dfa, len(ms))
	for i, a := range ms {
		dfas[i] = newDFA(m, a, reps)
	}
	// Product states, stored flat: node i has domain state doms[i], the
	// matcher ids ids[i*k:(i+1)*k], and was reached from parent[i] by
	// byte via[i] (its witness is spelt by walking the parents).
	k := len(ms)
	doms := []int{dom.start}
	ids := make([]int32, k, 64*k)
	parent := []int32{-1}
	via := []byte{0}
	depth := []int32{0}
	for i, d := range dfas {
		ids[i] = d.start
	}
	keyOf := func(dm int, v []int32) string {
		key = key[:0]
		key = appendVarint(key, dm)
		for _, x := range v {
			key = appendVarint(key, int(x))
		}
		return string(key)
	}
	seen := map[string]struct{}{keyOf(dom.start, ids): {}}
	found := map[string]struct{}{}
	word := func(n int) string {
		w := make([]byte, depth[n])
		for i := len(w) - 1; i >= 0; i-- {
			w[i] = via[n]
			n = int(parent[n])
		}
		return string(w)
	}
	var out []string
	vec := make([]byte, k)
	next := make([]int32, k)
	// What a product state costs to keep (its ids, key and links) and to
	// expand (a step of every matcher on every class).
	stateCost := 2*k + 16
	// Bytes: ids (4k, twice for the slack of append), the seen key (up
	// to 3k) and map entry, links.
	stateBytes := 11*k + 96
	expandCost := len(reps)*(k+1) + 1
	for n := 0; n < len(doms); n++ {
		m.charge(stageWitness, expandCost)
		cur := ids[n*k : (n+1)*k]
		if dom.accept(doms[n]) {
			for i, d := range dfas {
				vec[i] = '0'
				if d.accept[cur[i]] {
					vec[i] = '1'
				}
			}
			if _, ok := found[string(vec)]; !ok {
				found[string(vec)] = struct{}{}
				out = append(out, word(n))
			}
		}
		if dom.maxLen > 0 && int(depth[n]) >= dom.maxLen {
			continue
		}
		for ci, c := range reps {
			d := dom.step(doms[n], c)
			if d < 0 {
				continue
			}
			cur = ids[n*k : (n+1)*k]
			for i, d := range dfas {
				next[i] = d.step(cur[i], ci)
			}
			key := keyOf(d, next)
			if _, ok := seen[key]; ok {
				continue
			}
			m.charge(stageWitness, stateCost)
			m.hold(stageWitness, stateBytes)
			seen[key] = struct{}{}
			doms = append(doms, d)
			ids = append(ids, next...)
			parent = append(parent, int32(n))
			via = append(via, c)
			depth = append(depth, depth[n]+1)
		}
	}
	return out
}

const stageWitness = "witness search"

func appendVarint(b []byte, x int) []byte {
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// dfa is the subset construction of an nfa, built as it is explored, over
// the alphabet classes (one representative byte each).
type dfa struct {
	meter  *meter
	m      *nfa
	reps   []byte
	start  int32
	ids    map[string]int32 // ε-closed state set → id
	accept []bool
	sets   [][]int
	next   [][]int32 // per id, per class: id, or -1 not yet computed

	mark    []bool // scratch space of stepSet and intern
	scratch []int
	key     []byte
}

func newDFA(mt *meter, m *nfa, reps []byte) *dfa {
	d := &dfa{meter: mt, m: m, reps: reps, ids: map[string]int32{}}
	d.start = d.intern(m.closure([]int{m.start}))
	return d
}

// intern returns the id of an ε-closed state set (sorted, as closure
// returns it; empty for the dead set), which it copies when new.
func (d *dfa) intern(set []int) int32 {
	kb := d.key[:0]
	for _, s := range set {
		kb = appendVarint(kb, s)
	}
	d.key = kb
	if id, ok := d.ids[string(kb)]; ok {
		return id
	}
	d.meter.charge(stageWitness, 2*len(set)+len(d.reps)+16)
	d.meter.hold(stageWitness, 24*len(set)+8*len(d.reps)+96)
	id := int32(len(d.sets))
	d.ids[string(kb)] = id
	set = slices.Clone(set)
	d.sets = append(d.sets, set)
	d.accept = append(d.accept, d.m.accepts(set))
	row := make([]int32, len(d.reps))
	for i := range row {
		row[i] = -1
	}
	d.next = append(d.next, row)
	return id
}

func (d *dfa) step(id int32, class int) int32 {
	if to := d.next[id][class]; to >= 0 {
		return to
	}
	d.meter.charge(stageWitness, len(d.sets[id])+1)
	to := d.intern(d.stepSet(d.sets[id], d.reps[class]))
	d.next[id][class] = to
	return to
}

// stepSet is m.step(set, c) into scratch space: the ε-closed, sorted set
// of states reached from set on c (empty for none). intern copies it when
// it is new.
func (d *dfa) stepSet(set []int, c byte) []int {
	m := d.m
	if d.mark == nil {
		d.mark = make([]bool, len(m.trans))
	}
	stack := d.scratch[:0]
	for _, s := range set {
		for _, e := range m.trans[s] {
			if !d.mark[e.to] && e.pred(c) {
				d.mark[e.to] = true
				stack = append(stack, e.to)
			}
		}
	}
	for i := 0; i < len(stack); i++ {
		for _, t := range m.eps[stack[i]] {
			if !d.mark[t] {
				d.mark[t] = true
				stack = append(stack, t)
			}
		}
	}
	for _, s := range stack {
		d.mark[s] = false
	}
	slices.Sort(stack)
	d.scratch = stack
	return stack
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	neg := i < 0
	if neg {
		i = -i
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	if neg {
		n--
		b[n] = '-'
	}
	return string(b[n:])
}
