package distribution

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/internal/signing"
	"github.com/portcullis-dev/portcullis/internal/telemetry"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// The push hub: every committed version reaches every policy stream of its
// sandbox on this replica.
//
// Each sandbox with streams has a topic holding the newest signed version.
// Offering a version only swaps that pointer (if newer) and wakes the
// topic's streams; it never waits for one. A woken stream sends whatever
// is newest when it gets to send, so a slow or stuck proxy skips the
// versions it missed (latest wins) and holds up nobody: not the other
// streams, not the committing request.
//
// Versions reach a topic two ways: the store's commit feed (committed;
// every commit through this replica at once, and on Postgres those of
// other replicas through LISTEN/NOTIFY), and the periodic version check
// that repairs a missed notification (check). Whichever comes first wins;
// the other finds the version already there.
//
// The commit feed calls committed one commit at a time, for every
// sandbox, so it never reads the store itself: it notes the sandbox's
// newest version and a loader per sandbox reads and signs it, at most
// maxLoads sandboxes at once. Commits to one sandbox that arrive while
// its version is being read are read once, the newest; a slow read for
// one sandbox holds up no other. A version committed through this
// replica comes with its row, so its loader only signs it: a freeze
// reaches the proxies without waiting for a read of what it just wrote.

// signedVersion is one committed version, signed once and shared by every
// stream that sends it. It is never modified, but for the longer ancestry
// its streams read (older).
type signedVersion struct {
	policy *portcullisv1.SignedPolicy // Nonce, Keys, Ca, Traceparent and Ancestry unset
	chain  []*portcullisv1.GatewayKey
	// lineage is the version's own lineage (the next version's parent);
	// recent the policy hashes of up to ancestryKept versions before it,
	// oldest first: a stream whose proxy missed that many or fewer sends
	// them without reading the store.
	lineage string
	recent  []string
	// older holds the hashes from version olderFrom to version-1, read
	// for a stream whose proxy missed more than recent holds: the other
	// streams that held the same version (or a later one) reuse them.
	olderMu   sync.Mutex
	olderFrom uint32
	older     []string
	// committed is the span that committed the version (its provenance's
	// traceparent), the parent of each delivery's span; invalid if none.
	committed trace.SpanContext
}

func (v *signedVersion) version() uint32 { return v.policy.GetVersion() }

// committedAt is when the version was committed, for the ACK lag.
func (v *signedVersion) committedAt() time.Time { return v.policy.GetCommittedAt().AsTime() }

type hub struct {
	st     store.Reader
	signer *signer

	mu     sync.Mutex
	topics map[string]*topic
	// draining: the gateway is shutting down; every stream is asked to
	// reconnect, including those that subscribe from now on.
	draining bool
	// wanted holds, per sandbox whose loader runs, the newest commit
	// heard and not yet taken by it (Version 0: none); loads bounds the
	// loaders reading at once.
	wanted  map[string]store.Commit
	loads   chan struct{}
	loaders sync.WaitGroup
}

// maxLoads bounds the versions a replica reads and signs at once for its
// streams: a burst of commits must not take the store's whole pool.
const maxLoads = 4

type topic struct {
	sandbox string
	latest  atomic.Pointer[signedVersion]
	subs    map[*policyStream]struct{} // guarded by hub.mu
}

func newHub(st store.Reader, sg *signer) *hub {
	return &hub{st: st, signer: sg, topics: make(map[string]*topic), wanted: make(map[string]store.Commit), loads: make(chan struct{}, maxLoads)}
}

// subscribe adds ps to its sandbox's topic and makes sure the topic holds
// the current version. ps is registered before the current version is
// read, so a commit racing with it is either read here or offered after.
// A proxy that holds a version newer than the topic's (it comes from a
// replica that heard of a commit first) has the topic read again from
// the store, rather than be offered an older version it would refuse.
func (h *hub) subscribe(ctx context.Context, sandbox string, ps *policyStream, held uint32) (*topic, error) {
	h.mu.Lock()
	t := h.topics[sandbox]
	if t == nil {
		t = &topic{sandbox: sandbox, subs: make(map[*policyStream]struct{})}
		h.topics[sandbox] = t
	}
	ps.topic = t // before any offer can wake ps
	t.subs[ps] = struct{}{}
	if h.draining {
		ps.goawayDue.Store(true)
	}
	h.mu.Unlock()

	if cur := t.latest.Load(); cur != nil && cur.version() >= held {
		// The topic already had streams: every commit since its version
		// was read has been offered to it (or will be, by the check).
		return t, nil
	}
	sv, err := h.load(ctx, t, 0, nil)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// No policy yet: the proxy denies everything until the first one.
	case err != nil:
		h.unsubscribe(t, ps)
		return nil, err
	default:
		h.offer(t, sv)
	}
	return t, nil
}

func (h *hub) unsubscribe(t *topic, ps *policyStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(t.subs, ps)
	if len(t.subs) == 0 && h.topics[t.sandbox] == t {
		delete(h.topics, t.sandbox)
	}
}

// notify offers version of sandbox if it is newer than the topic's: the
// row inserted, if the commit came with it (store.Commit.Inserted), else
// read from the store.
func (h *hub) notify(ctx context.Context, sandbox string, version int64, inserted *store.PolicyVersion) error {
	t := h.topic(sandbox)
	if t == nil {
		return nil
	}
	if cur := t.latest.Load(); cur != nil && int64(cur.version()) >= version {
		return nil
	}
	sv, err := h.load(ctx, t, version, inserted)
	if err != nil {
		return err
	}
	h.offer(t, sv)
	return nil
}

// committed notes that c was committed, for its sandbox's loader to read
// (if it came without its row) and offer (notify) in the background, and
// returns at once. onErr hears a load that failed (the version check
// repairs it).
func (h *hub) committed(ctx context.Context, c store.Commit, onErr func(sandbox string, version int64, err error)) {
	sandbox := c.Sandbox
	h.mu.Lock()
	t := h.topics[sandbox]
	if t == nil { // no stream of this sandbox here
		h.mu.Unlock()
		return
	}
	if cur := t.latest.Load(); cur != nil && int64(cur.version()) >= c.Version {
		h.mu.Unlock()
		return
	}
	want, running := h.wanted[sandbox]
	if c.Version > want.Version {
		h.wanted[sandbox] = c
	}
	h.mu.Unlock()
	if running {
		return // its loader takes the newest when it gets to it
	}
	h.loaders.Go(func() { h.loadLoop(ctx, sandbox, onErr) })
}

// loadLoop reads and offers the newest version wanted for sandbox until
// none is left.
func (h *hub) loadLoop(ctx context.Context, sandbox string, onErr func(string, int64, error)) {
	for {
		h.mu.Lock()
		c := h.wanted[sandbox]
		if c.Version == 0 {
			delete(h.wanted, sandbox)
			h.mu.Unlock()
			return
		}
		h.wanted[sandbox] = store.Commit{}
		h.mu.Unlock()
		select {
		case h.loads <- struct{}{}:
		case <-ctx.Done():
			h.mu.Lock()
			delete(h.wanted, sandbox)
			h.mu.Unlock()
			return
		}
		err := h.notify(ctx, sandbox, c.Version, c.Inserted)
		<-h.loads
		if err != nil && ctx.Err() == nil {
			onErr(sandbox, c.Version, err)
		}
	}
}

// check compares every topic with the sandboxes' current versions and
// offers what a lost notification left behind.
func (h *hub) check(ctx context.Context) error {
	h.mu.Lock()
	n := len(h.topics)
	h.mu.Unlock()
	if n == 0 {
		return nil
	}
	sandboxes, err := h.st.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sandboxes {
		if sb.CurrentVersion > 0 {
			errs = append(errs, h.notify(ctx, sb.Name, sb.CurrentVersion, nil))
		}
	}
	return errors.Join(errs...)
}

// goaway asks every stream of sandbox to reconnect (its token was
// rotated or revoked).
func (h *hub) goaway(sandbox string) {
	h.mu.Lock()
	var subs []*policyStream
	if t := h.topics[sandbox]; t != nil {
		for ps := range t.subs {
			subs = append(subs, ps)
		}
	}
	h.mu.Unlock()
	sendGoaway(subs)
}

// sendGoaway makes a goaway due on each stream and wakes it.
func sendGoaway(subs []*policyStream) {
	for _, ps := range subs {
		ps.goawayDue.Store(true)
		ps.wake()
	}
}

// goawayAll asks every stream to reconnect, now and as it subscribes
// (the gateway is shutting down). One call for all of them, rather than
// a callback per stream: an idle stream costs less.
func (h *hub) goawayAll() {
	h.mu.Lock()
	h.draining = true
	var subs []*policyStream
	for _, t := range h.topics {
		for ps := range t.subs {
			subs = append(subs, ps)
		}
	}
	h.mu.Unlock()
	sendGoaway(subs)
}

func (h *hub) topic(sandbox string) *topic {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.topics[sandbox]
}

// offer makes sv the topic's latest if it is newer, and wakes its streams.
func (h *hub) offer(t *topic, sv *signedVersion) {
	for {
		cur := t.latest.Load()
		if cur != nil && cur.version() >= sv.version() {
			return
		}
		if t.latest.CompareAndSwap(cur, sv) {
			break
		}
	}
	h.mu.Lock()
	subs := make([]*policyStream, 0, len(t.subs))
	for ps := range t.subs {
		subs = append(subs, ps)
	}
	h.mu.Unlock()
	for _, ps := range subs {
		ps.wake()
	}
}

// load signs a version (0: the current one): inserted if it is that
// version, else read from the store.
func (h *hub) load(ctx context.Context, t *topic, version int64, inserted *store.PolicyVersion) (*signedVersion, error) {
	sandbox := t.sandbox
	if inserted != nil && version > 0 && inserted.Sandbox == sandbox && inserted.Version == version {
		return h.sign(ctx, t, *inserted)
	}
	v, err := h.st.GetPolicyVersion(ctx, sandbox, version)
	if err != nil {
		return nil, err
	}
	return h.sign(ctx, t, v)
}

// ancestryKept bounds the hashes a signed version keeps of the versions
// before it (signedVersion.recent): about 1.3 KB per sandbox with
// streams, enough for a burst of commits its loader took as one; a stream
// whose proxy missed more reads them (Distribution.hashes).
const ancestryKept = 16

// sign signs v, naming its parent: the lineage of the version before it,
// which extends the lineage of t's latest version when that one is older,
// and is read from the sandbox's history otherwise.
func (h *hub) sign(ctx context.Context, t *topic, v store.PolicyVersion) (*signedVersion, error) {
	if v.Version < 1 || v.Version > int64(^uint32(0)) {
		return nil, fmt.Errorf("version %d of %q out of range", v.Version, v.Sandbox)
	}
	parent, recent, err := h.lineage(ctx, t, v)
	if err != nil {
		return nil, err
	}
	sp := &portcullisv1.SignedPolicy{
		Sandbox:     v.Sandbox,
		Version:     uint32(v.Version),
		Hash:        v.Hash,
		Document:    v.Document,
		CommittedAt: timestamppb.New(v.CreatedAt),
		Parent:      parent,
	}
	chain, err := h.signer.sign(ctx, sp)
	if err != nil {
		return nil, err
	}
	committed, _ := telemetry.ParseTraceparent(v.Provenance[telemetry.ProvenanceKey])
	return &signedVersion{policy: sp, chain: chain, committed: committed,
		lineage: signing.Lineage(parent, sp.Version, sp.Hash), recent: recent}, nil
}

// lineage returns v's parent (the lineage of version v-1, "" for version
// 1) and the hashes of up to ancestryKept versions before v. From t's
// latest version, when older than v, it reads only the hashes of the
// versions between (none for the next one); else the whole history's.
func (h *hub) lineage(ctx context.Context, t *topic, v store.PolicyVersion) (string, []string, error) {
	var (
		parent string
		recent []string
		from   int64 // the versions up to from are in parent
	)
	if prev := t.latest.Load(); prev != nil && int64(prev.version()) < v.Version {
		parent, from = prev.lineage, int64(prev.version())
		recent = append(slices.Clone(prev.recent), prev.policy.GetHash())
	}
	if from < v.Version-1 {
		hashes, err := h.st.PolicyHashes(ctx, v.Sandbox, from+1, v.Version-1)
		if err != nil {
			return "", nil, fmt.Errorf("lineage of %q version %d: %w", v.Sandbox, v.Version, err)
		}
		if int64(len(hashes)) != v.Version-1-from {
			return "", nil, fmt.Errorf("lineage of %q version %d: the history holds %d of versions %d to %d", v.Sandbox, v.Version, len(hashes), from+1, v.Version-1)
		}
		for _, hash := range hashes {
			from++
			parent = signing.Lineage(parent, uint32(from), hash)
		}
		recent = append(recent, hashes...)
	}
	if len(recent) > ancestryKept {
		recent = slices.Clone(recent[len(recent)-ancestryKept:])
	}
	return parent, recent, nil
}

// ancestry returns the hashes of the versions from to version-1: from
// recent, else read once (read) and shared with the streams that need as
// many or fewer.
func (v *signedVersion) ancestry(from uint32, read func(from, to uint32) ([]string, error)) ([]string, error) {
	need := int(v.version() - from)
	if need <= len(v.recent) {
		return v.recent[len(v.recent)-need:], nil
	}
	v.olderMu.Lock()
	defer v.olderMu.Unlock()
	if v.older != nil && v.olderFrom <= from {
		return v.older[from-v.olderFrom:], nil
	}
	hashes, err := read(from, v.version()-1)
	if err != nil {
		return nil, err
	}
	v.older, v.olderFrom = hashes, from
	return hashes, nil
}

// hashes returns the policy hashes of sandbox's versions from to to, in
// order: the ancestry of a version sent to a proxy that missed more
// versions than the version keeps.
func (d *Distribution) hashes(ctx context.Context, sandbox string, from, to uint32) ([]string, error) {
	out, err := d.st.PolicyHashes(ctx, sandbox, int64(from), int64(to))
	if err != nil {
		return nil, err
	}
	if len(out) != int(to-from+1) {
		return nil, fmt.Errorf("the history of %q holds %d of versions %d to %d", sandbox, len(out), from, to)
	}
	return out, nil
}
