package sandboxdns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/portcullis-dev/portcullis/policy"
)

// Defaults of Config.
const (
	// DefaultTTL is how long an answer is cached and the TTL clients are
	// given (counted down as the cached answer ages). Lookup reports no TTL
	// of its own, so this stands for one: short enough for the addresses
	// of CDNs and load balancers (whose records live 20 to 60 seconds),
	// long enough that a busy client costs one lookup per name every half
	// minute.
	DefaultTTL = 30 * time.Second
	// DefaultGrace is how long past an answer's TTL Names still returns its
	// name for its addresses: clients connect after resolving, some keep
	// an address longer than its TTL (connection pools, runtimes that
	// cache lookups), and the proxy must still know the name they
	// resolved.
	DefaultGrace = 10 * time.Minute
	// DefaultMaxNames bounds the answers cached (the oldest go first).
	DefaultMaxNames = 4096
	// DefaultMaxAddrs bounds the addresses Names remembers (those answered
	// least recently go first).
	DefaultMaxAddrs = 65536
	// DefaultLookupTimeout bounds one Lookup.
	DefaultLookupTimeout = 5 * time.Second
)

const (
	// maxAnswers bounds the A records of one answer, so that it always
	// fits the 512 bytes of a UDP answer without EDNS: 8 records of 16
	// bytes, with a question name of at most 255 bytes and the header.
	maxAnswers = 8
	// maxNamesPerAddr bounds the names Names returns for one address.
	maxNamesPerAddr = 8
	// maxInFlight bounds the queries answered at once; the next packet is
	// read when one of them is done (the kernel's buffer holds the rest).
	maxInFlight = 256
	// readBuffer is larger than any query a client sends; a datagram that
	// fills it was cut by the read, and is dropped.
	readBuffer = 4096
	// ednsSize is the UDP payload size advertised to EDNS clients (the
	// DNS flag day 2020 value).
	ednsSize = 1232
)

// Config is what a Server needs. Wants and Lookup are required.
type Config struct {
	// Wants reports whether name could be matched by some endpoint of the
	// policy (the proxy passes match.Matcher.WantsName on its current
	// policy). It is asked for every query, with the question's name in
	// lower case, without its trailing dot, and only when the name is a
	// valid host name (policy.ValidHostName) and not an IP address. It is
	// called concurrently and must return at once.
	Wants func(name string) bool
	// Lookup resolves a wanted name (the proxy passes its Config.Resolve).
	// A *net.DNSError that IsNotFound is answered NXDOMAIN, any other error
	// SERVFAIL. Only the IPv4 addresses it returns are answered (at most
	// 8, in its order).
	Lookup func(ctx context.Context, name string) ([]netip.Addr, error)
	// Denied, when set, is called with the name (as Wants would get it, or
	// the question's name in lower case when it is no valid host name) of
	// every question answered NXDOMAIN because no endpoint could match it:
	// a denial worth a decision record ("no endpoint of the policy matches
	// NAME; answered NXDOMAIN"). It is called on the query's goroutine and
	// must return at once.
	Denied func(name string)
	// TTL: DefaultTTL when zero.
	TTL time.Duration
	// Grace: DefaultGrace when zero.
	Grace time.Duration
	// MaxNames: DefaultMaxNames when zero.
	MaxNames int
	// MaxAddrs: DefaultMaxAddrs when zero.
	MaxAddrs int
	// LookupTimeout: DefaultLookupTimeout when zero.
	LookupTimeout time.Duration
	// Logger: nothing is logged when nil. Queries are logged at Debug.
	Logger *slog.Logger
	// Now: time.Now when nil (tests pass a fake clock).
	Now func() time.Time
}

// Server answers DNS queries (Serve) and remembers what it answered
// (Names). Its methods may be called concurrently.
type Server struct {
	cfg   Config
	log   *slog.Logger
	stats counters

	mu      sync.Mutex
	answers cache
	names   memory

	// onJoin, when set (tests), is called when a query joins a lookup
	// already in flight for its name.
	onJoin func()
}

// New returns a Server for cfg, or an error when Wants or Lookup is
// missing or a bound is negative.
func New(cfg Config) (*Server, error) {
	if cfg.Wants == nil || cfg.Lookup == nil {
		return nil, errors.New("sandboxdns: Config.Wants and Config.Lookup are required")
	}
	if cfg.TTL < 0 || cfg.Grace < 0 || cfg.MaxNames < 0 || cfg.MaxAddrs < 0 || cfg.LookupTimeout < 0 {
		return nil, errors.New("sandboxdns: a negative TTL, grace, bound or timeout")
	}
	cfg.TTL = cmp.Or(cfg.TTL, DefaultTTL)
	cfg.Grace = cmp.Or(cfg.Grace, DefaultGrace)
	cfg.MaxNames = cmp.Or(cfg.MaxNames, DefaultMaxNames)
	cfg.MaxAddrs = cmp.Or(cfg.MaxAddrs, DefaultMaxAddrs)
	cfg.LookupTimeout = cmp.Or(cfg.LookupTimeout, DefaultLookupTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log.With("component", "sandboxdns")}
	s.answers.init(cfg.MaxNames)
	s.names.init(cfg.MaxAddrs)
	return s, nil
}

// Serve answers the queries read from conn until ctx ends, then returns
// nil once every answer in flight is written or dropped; it returns an
// error when reading from conn fails otherwise. It does not close conn,
// but sets a past read deadline on it when ctx ends (to stop reading).
// Serve may be called on several connections at once.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxInFlight)
	buf := make([]byte, readBuffer)
	for {
		n, from, err := conn.ReadFrom(buf)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sandboxdns: read: %w", err)
		}
		if n == len(buf) {
			s.stats.malformed.Add(1)
			continue
		}
		pkt := append([]byte(nil), buf[:n]...)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if out := s.answer(ctx, pkt); out != nil {
				if _, err := conn.WriteTo(out, from); err != nil {
					s.log.Debug("write answer", "to", from.String(), "error", err)
				}
			}
		})
	}
}

// Names returns the names this server answered with addr (an IPv4-mapped
// address is read as its IPv4 address), most recently answered first: each
// for at least its answer's TTL plus Config.Grace, unless evicted by the
// bounds. None when no name was answered with addr.
func (s *Server) Names(addr netip.Addr) []string {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names.get(addr.Unmap().WithZone(""), now)
}

// Stats counts what a Server did since New.
type Stats struct {
	Queries   uint64 // packets read that were queries (not dropped)
	Malformed uint64 // packets dropped or answered FORMERR
	Answered  uint64 // NOERROR answers (with or without records)
	Denied    uint64 // NXDOMAIN answers for names no endpoint could match
	NotFound  uint64 // NXDOMAIN answers for wanted names Lookup did not find
	Failed    uint64 // SERVFAIL answers (Lookup failed)
	Lookups   uint64 // Lookup calls
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{Queries: c.queries.Load(), Malformed: c.malformed.Load(), Answered: c.answered.Load(), Denied: c.denied.Load(),
		NotFound: c.notFound.Load(), Failed: c.failed.Load(), Lookups: c.lookups.Load()}
}

type counters struct {
	queries, malformed, answered, denied, notFound, failed, lookups atomic.Uint64
}

// answer is the answer to one packet, or nil when it is dropped.
func (s *Server) answer(ctx context.Context, pkt []byte) []byte {
	// A response (QR set) is never answered: no loops between servers,
	// no reflection of spoofed answers.
	if len(pkt) < 12 || pkt[2]&0x80 != 0 {
		s.stats.malformed.Add(1)
		return nil
	}
	req := new(dns.Msg)
	if err := req.Unpack(pkt); err != nil {
		s.stats.malformed.Add(1)
		m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: uint16(pkt[0])<<8 | uint16(pkt[1]), Response: true, Rcode: dns.RcodeFormatError}}
		return pack(m, dns.MinMsgSize)
	}
	s.stats.queries.Add(1)
	m, size := s.reply(ctx, req)
	return pack(m, size)
}

// reply is the answer to a parsed query and the largest answer the client
// reads.
func (s *Server) reply(ctx context.Context, req *dns.Msg) (*dns.Msg, int) {
	m := new(dns.Msg)
	size := dns.MinMsgSize
	opt, ok := ednsOf(req)
	if !ok || len(req.Question) != 1 || len(req.Answer) != 0 || len(req.Ns) != 0 {
		s.stats.malformed.Add(1)
		m.SetRcodeFormatError(req)
		return m, size
	}
	m.SetReply(req)
	m.RecursionAvailable = true
	if opt != nil {
		size = max(int(opt.UDPSize()), dns.MinMsgSize)
		m.SetEdns0(ednsSize, false)
		if opt.Version() != 0 {
			m.Rcode = dns.RcodeBadVers
			return m, size
		}
	}
	if req.Opcode != dns.OpcodeQuery {
		m.Rcode = dns.RcodeNotImplemented
		return m, size
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET {
		m.Rcode = dns.RcodeRefused
		return m, size
	}
	name := policy.NormalizeHost(q.Name)
	if !s.wanted(name) {
		s.stats.denied.Add(1)
		s.log.Debug("denied", "name", name, "type", dns.Type(q.Qtype).String())
		if s.cfg.Denied != nil {
			s.cfg.Denied(name)
		}
		m.Rcode = dns.RcodeNameError
		return m, size
	}
	if q.Qtype != dns.TypeA {
		// AAAA included: the sandbox is served over IPv4 only, and a
		// name without AAAA records makes clients use its A records.
		s.stats.answered.Add(1)
		return m, size
	}
	addrs, ttl, err := s.lookup(ctx, name)
	switch {
	case isNotFound(err):
		s.stats.notFound.Add(1)
		m.Rcode = dns.RcodeNameError
		return m, size
	case err != nil:
		s.stats.failed.Add(1)
		s.log.Debug("lookup failed", "name", name, "error", err)
		m.Rcode = dns.RcodeServerFailure
		return m, size
	}
	for _, a := range addrs {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: uint32(ttl / time.Second)},
			A:   a.AsSlice(),
		})
	}
	s.stats.answered.Add(1)
	return m, size
}

// wanted: name is a host name, not an address, and Wants it.
func (s *Server) wanted(name string) bool {
	if !policy.ValidHostName(name) {
		return false
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return false
	}
	return s.cfg.Wants(name)
}

// ednsOf returns the query's OPT record, if any; false when its additional
// section holds anything else, or more than one OPT.
func ednsOf(req *dns.Msg) (*dns.OPT, bool) {
	switch len(req.Extra) {
	case 0:
		return nil, true
	case 1:
		opt, ok := req.Extra[0].(*dns.OPT)
		return opt, ok && opt.Hdr.Name == "."
	}
	return nil, false
}

func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// pack encodes m for a client that reads size bytes, or nil when it cannot
// be encoded.
func pack(m *dns.Msg, size int) []byte {
	m.Truncate(size)
	m.Compress = true
	out, err := m.Pack()
	if err != nil {
		return nil
	}
	return out
}
