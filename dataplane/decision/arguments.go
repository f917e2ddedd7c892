package decision

import "sync"

// Arguments remembers the arguments of the most recent denied tools/call
// requests by denial id, in the proxy's memory only: records carry just
// their digest, and policy.local, in the sandbox beside the proxy, hands
// them to the gateway when the agent asks for a proposal from one of those
// denials. Memory is bounded by entries and by bytes: the oldest go first,
// and arguments larger than the per-entry bound are not kept.
type Arguments struct {
	mu       sync.Mutex
	byID     map[string][]byte
	order    []string // oldest first
	bytes    int
	maxItems int
	maxBytes int
	maxEach  int
}

// Bounds of the proxy's Arguments.
const (
	ArgumentsEntries  = 128
	ArgumentsBytes    = 4 << 20
	ArgumentsPerEntry = 256 << 10
)

// NewArguments keeps at most maxItems entries of at most maxEach bytes,
// maxBytes in all.
func NewArguments(maxItems, maxBytes, maxEach int) *Arguments {
	return &Arguments{byID: map[string][]byte{}, maxItems: maxItems, maxBytes: maxBytes, maxEach: min(maxEach, maxBytes)}
}

// Put keeps a copy of args for denialID, evicting the oldest entries as
// needed. It reports whether they were kept (false when larger than the
// per-entry bound, or denialID is empty or already kept).
func (a *Arguments) Put(denialID string, args []byte) bool {
	if denialID == "" || len(args) > a.maxEach || a.maxItems <= 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.byID[denialID]; dup {
		return false
	}
	for len(a.order) > 0 && (len(a.order) >= a.maxItems || a.bytes+len(args) > a.maxBytes) {
		old := a.order[0]
		a.order = a.order[1:]
		a.bytes -= len(a.byID[old])
		delete(a.byID, old)
	}
	a.byID[denialID] = append([]byte(nil), args...)
	a.order = append(a.order, denialID)
	a.bytes += len(args)
	return true
}

// Get returns a copy of the arguments kept for denialID.
func (a *Arguments) Get(denialID string) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.byID[denialID]
	if !ok {
		return nil, false
	}
	return append([]byte(nil), b...), true
}

// Len returns how many entries are kept and their bytes.
func (a *Arguments) Len() (entries, bytes int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.order), a.bytes
}
