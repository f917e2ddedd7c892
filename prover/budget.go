package prover

import (
	"context"
	"errors"
	"fmt"
)

// The prover's work is exponential in the worst case: n path globs such
// as `/v1/*a*b*c*` realise up to 2^n combinations of matches, and the
// witness search visits every one. Every proof therefore runs under a
// budget of work units, charged as it goes (one unit is roughly one
// automaton step, one table cell or one byte-sized piece of a signature;
// a policy.Decide call costs the size of the sub-policy it reads), and
// stops with a *TooComplexError the moment the budget is spent. It also
// stops when its context is cancelled. Neither answer is partial: a proof
// either completes exactly or returns an error and no report.

// DefaultBudget is the work a proof may do when Options.Budget is zero:
// a few seconds of CPU on one core of the reference machine (see
// BENCHMARKS.md, "Prover under attack"); memory is bounded apart, by
// MemoryBudget. Policies written by people use a small fraction of it:
// each example, and a one-rule change to the 1,000-rule benchmark, below
// 5%; the whole 1,000-rule benchmark policy proved as new, about half.
const DefaultBudget int64 = 160_000_000

// MemoryBudget bounds the memory a proof's search structures may hold
// (product states, matcher states, their tables), estimated in bytes with
// the slack of growing slices; beyond it the proof is refused like one
// over its work budget.
const MemoryBudget int64 = 96 << 20

// ErrTooComplex is what every *TooComplexError is (errors.Is).
var ErrTooComplex = errors.New("too complex to prove")

// TooComplexError: the proof would take more than its budget; it was
// refused, not approximated.
type TooComplexError struct {
	Stage string // where the budget ran out: "witness search", "candidate requests", …
	Limit int64  // the budget, in work units (or bytes, when Memory)
	Used  int64  // the work (bytes) spent before the refusal (at most Limit)
	// Memory: the memory budget ran out, not the work budget.
	Memory bool
}

func (e *TooComplexError) Error() string {
	if e.Memory {
		return fmt.Sprintf("too complex to prove — refused: the %s needs more than the prover's memory budget of %d MB; use fewer or simpler globs, or split the change", e.Stage, e.Limit>>20)
	}
	return fmt.Sprintf("too complex to prove — refused: the %s needs more than the prover's budget of %d work units; use fewer or simpler globs, or split the change", e.Stage, e.Limit)
}

func (e *TooComplexError) Unwrap() error { return ErrTooComplex }

// ctxCheckEvery is how many work units pass between looks at the context.
const ctxCheckEvery = 1 << 14

// meter counts a proof's work against its budget. It belongs to one
// proof, run by one goroutine.
type meter struct {
	ctx   context.Context
	used  int64
	limit int64
	next  int64 // used at which the context is looked at next
	mem   int64 // bytes held by the search structures (estimated)
}

// abort carries a budget or context error up through the proof (charge
// panics with it; Prove recovers it): the search is deep and its
// functions return values, not errors.
type abort struct{ err error }

func newMeter(ctx context.Context, limit int64) *meter {
	if limit <= 0 {
		limit = DefaultBudget
	}
	return &meter{ctx: ctx, limit: limit}
}

// charge spends n units of work at stage, before the work is done; it
// does not return when that would exceed the budget or the context is
// done.
func (m *meter) charge(stage string, n int) {
	if m.used+int64(n) > m.limit {
		panic(abort{&TooComplexError{Stage: stage, Limit: m.limit, Used: m.used}})
	}
	m.used += int64(n)
	if m.used >= m.next {
		m.next = m.used + ctxCheckEvery
		if err := m.ctx.Err(); err != nil {
			panic(abort{fmt.Errorf("prover: %w", err)})
		}
	}
}

// hold records bytes of search structures the proof keeps until their
// release (a witness search, a destination group); it does not
// return when that would exceed MemoryBudget.
func (m *meter) hold(stage string, bytes int) {
	if m.mem+int64(bytes) > MemoryBudget {
		panic(abort{&TooComplexError{Stage: stage, Limit: MemoryBudget, Used: m.mem, Memory: true}})
	}
	m.mem += int64(bytes)
}

// mark returns what the search structures hold now; release(mark) when
// the structures allocated since are dropped.
func (m *meter) mark() int64 { return m.mem }

func (m *meter) release(mark int64) { m.mem = mark }

// slots bounds how many proofs run at once in the process, so that the
// memory a budget allows is not multiplied by concurrent callers (a
// gateway serves proofs to every sandbox): two, whatever the number of
// CPUs, since a proof of a policy people write takes milliseconds. A
// proof waits for a slot as long as its context allows.
var slots = make(chan struct{}, 2)

func acquire(ctx context.Context) error {
	select {
	case slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("prover: %w", ctx.Err())
	}
}

func release() { <-slots }
