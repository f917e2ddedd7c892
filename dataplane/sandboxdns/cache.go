package sandboxdns

import (
	"container/list"
	"context"
	"net/netip"
	"slices"
	"time"
)

// lookup returns name's IPv4 addresses and the TTL left on them: from the
// cache, from the lookup already in flight for name, or from a Lookup of
// its own (whose answer the cache keeps for Config.TTL; a failure is not
// kept). The addresses answered are remembered for Names.
func (s *Server) lookup(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	now := s.cfg.Now()
	s.mu.Lock()
	a, fresh := s.answers.get(name, now)
	created := a == nil
	if created {
		a = s.answers.add(name)
	}
	s.mu.Unlock()
	switch {
	case created:
		s.resolve(ctx, name, a)
	case !fresh && s.onJoin != nil:
		s.onJoin()
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	if a.err != nil {
		return nil, 0, a.err
	}
	now = s.cfg.Now()
	ttl := a.expires.Sub(now).Truncate(time.Second)
	if ttl < time.Second {
		ttl = time.Second
	}
	if len(a.addrs) > 0 {
		s.mu.Lock()
		s.names.add(name, a.addrs, now.Add(ttl+s.cfg.Grace))
		s.mu.Unlock()
	}
	return a.addrs, ttl, nil
}

// resolve runs Lookup for a, the entry of name this query created, and
// completes it.
func (s *Server) resolve(ctx context.Context, name string, a *answer) {
	s.stats.lookups.Add(1)
	lctx, cancel := context.WithTimeout(ctx, s.cfg.LookupTimeout)
	addrs, err := s.cfg.Lookup(lctx, name)
	cancel()
	var v4 []netip.Addr
	for _, ip := range addrs {
		ip = ip.Unmap().WithZone("")
		if ip.Is4() && !slices.Contains(v4, ip) && len(v4) < maxAnswers {
			v4 = append(v4, ip)
		}
	}
	s.mu.Lock()
	a.addrs, a.err, a.expires = v4, err, s.cfg.Now().Add(s.cfg.TTL)
	if err != nil {
		s.answers.remove(name, a)
	}
	close(a.done)
	s.mu.Unlock()
}

// answer is one name's answer, or the lookup in flight for it (done not
// closed yet).
type answer struct {
	done    chan struct{}
	addrs   []netip.Addr
	err     error
	expires time.Time
	elem    *list.Element // in cache.order
}

// cache holds the answers by name, bounded: the oldest is evicted first
// (all live Config.TTL, so the oldest is also the first to expire).
type cache struct {
	max   int
	byKey map[string]*answer
	order *list.List // of names, newest at the front
}

func (c *cache) init(max int) {
	c.max, c.byKey, c.order = max, map[string]*answer{}, list.New()
}

// get returns name's entry, and whether it is a fresh answer; nil when
// there is none to use (a stale answer is removed).
func (c *cache) get(name string, now time.Time) (*answer, bool) {
	a := c.byKey[name]
	if a == nil {
		return nil, false
	}
	select {
	case <-a.done:
		if now.Before(a.expires) {
			return a, true
		}
		c.remove(name, a)
		return nil, false
	default:
		return a, false // in flight: join it
	}
}

// add makes the entry a new lookup of name fills, evicting the oldest
// beyond the bound (a lookup in flight evicted still completes for the
// queries that wait on it).
func (c *cache) add(name string) *answer {
	a := &answer{done: make(chan struct{})}
	a.elem = c.order.PushFront(name)
	c.byKey[name] = a
	for c.order.Len() > c.max {
		old := c.order.Back().Value.(string)
		c.remove(old, c.byKey[old])
	}
	return a
}

func (c *cache) remove(name string, a *answer) {
	if c.byKey[name] != a || a == nil {
		return
	}
	delete(c.byKey, name)
	c.order.Remove(a.elem)
}

// memory is which names were answered with which address, bounded: the
// address answered least recently is evicted first.
type memory struct {
	max    int
	byAddr map[netip.Addr]*list.Element
	order  *list.List // of *addrNames, most recently answered at the front
}

type addrNames struct {
	addr  netip.Addr
	names []seen // most recent first, at most maxNamesPerAddr
}

type seen struct {
	name  string
	until time.Time
}

func (m *memory) init(max int) {
	m.max, m.byAddr, m.order = max, map[netip.Addr]*list.Element{}, list.New()
}

// add remembers name for each of addrs until the given time.
func (m *memory) add(name string, addrs []netip.Addr, until time.Time) {
	for _, addr := range addrs {
		e := m.byAddr[addr]
		if e == nil {
			e = m.order.PushFront(&addrNames{addr: addr})
			m.byAddr[addr] = e
		} else {
			m.order.MoveToFront(e)
		}
		an := e.Value.(*addrNames)
		an.names = slices.DeleteFunc(an.names, func(s seen) bool { return s.name == name })
		an.names = slices.Insert(an.names, 0, seen{name, until})
		if len(an.names) > maxNamesPerAddr {
			an.names = an.names[:maxNamesPerAddr]
		}
	}
	for m.order.Len() > m.max {
		old := m.order.Back()
		delete(m.byAddr, old.Value.(*addrNames).addr)
		m.order.Remove(old)
	}
}

// get returns the names remembered for addr at now, most recent first.
func (m *memory) get(addr netip.Addr, now time.Time) []string {
	e := m.byAddr[addr]
	if e == nil {
		return nil
	}
	an := e.Value.(*addrNames)
	var out []string
	for _, s := range an.names {
		if now.Before(s.until) {
			out = append(out, s.name)
		}
	}
	if out == nil {
		delete(m.byAddr, addr)
		m.order.Remove(e)
	}
	return out
}
