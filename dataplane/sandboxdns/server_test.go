package sandboxdns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock the tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// upstream is a Lookup that answers from a table and counts its calls.
type upstream struct {
	mu    sync.Mutex
	calls map[string]int
	table map[string][]netip.Addr
	err   error
}

func (u *upstream) lookup(_ context.Context, name string) ([]netip.Addr, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.calls == nil {
		u.calls = map[string]int{}
	}
	u.calls[name]++
	if u.err != nil {
		return nil, u.err
	}
	addrs, ok := u.table[name]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	return addrs, nil
}

func (u *upstream) count(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[name]
}

// wantsExample wants example.com and its subdomains.
func wantsExample(name string) bool {
	return name == "example.com" || strings.HasSuffix(name, ".example.com")
}

// start serves cfg on a UDP socket of 127.0.0.1 for the test's length.
func start(t *testing.T, cfg Config, tune ...func(*Server)) (*Server, string) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tune {
		f(s)
	}
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		conn.Close()
	})
	return s, conn.LocalAddr().String()
}

func exchange(t *testing.T, addr string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("exchange %v: %v", m.Question, err)
	}
	if r.Id != m.Id || !r.Response {
		t.Fatalf("answer %d (response %v) to query %d", r.Id, r.Response, m.Id)
	}
	return r
}

func ask(t *testing.T, addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return exchange(t, addr, m)
}

func addrsOf(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		out = append(out, rr.(*dns.A).A.String())
	}
	return out
}

func TestWantedNameAnswered(t *testing.T) {
	clk := newClock()
	up := &upstream{table: map[string][]netip.Addr{"api.example.com": {
		netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("2606:2800:220:1::1"),
		netip.MustParseAddr("::ffff:93.184.216.35"), netip.MustParseAddr("93.184.216.34"),
	}}}
	s, addr := start(t, Config{Wants: wantsExample, Lookup: up.lookup, Now: clk.Now})

	r := ask(t, addr, "API.Example.COM.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(addrsOf(r), []string{"93.184.216.34", "93.184.216.35"}) {
		t.Fatalf("A: %v", r)
	}
	if q := r.Question[0]; q.Name != "API.Example.COM." || r.Answer[0].Header().Name != "API.Example.COM." {
		t.Errorf("the question's spelling is not echoed: %v", r)
	}
	if ttl := r.Answer[0].Header().Ttl; ttl != uint32(DefaultTTL/time.Second) {
		t.Errorf("TTL %d, want %v", ttl, DefaultTTL)
	}
	if !r.RecursionAvailable || !r.RecursionDesired {
		t.Errorf("RA/RD: %v", r.MsgHdr)
	}
	for _, a := range []string{"93.184.216.34", "93.184.216.35", "::ffff:93.184.216.35"} {
		if got := s.Names(netip.MustParseAddr(a)); !slices.Equal(got, []string{"api.example.com"}) {
			t.Errorf("Names(%s) = %v", a, got)
		}
	}
	if got := s.Names(netip.MustParseAddr("2606:2800:220:1::1")); got != nil {
		t.Errorf("an address never answered has names %v", got)
	}

	// AAAA and the other types: no records, no lookup.
	for _, qt := range []uint16{dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeANY, dns.TypeHTTPS} {
		if r := ask(t, addr, "api.example.com.", qt); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("%s: %v", dns.Type(qt), r)
		}
	}

	// Cached: the TTL counts down, no second lookup until it runs out.
	clk.advance(10 * time.Second)
	r = ask(t, addr, "api.example.com.", dns.TypeA)
	if ttl := r.Answer[0].Header().Ttl; ttl != uint32((DefaultTTL-10*time.Second)/time.Second) {
		t.Errorf("cached TTL %d", ttl)
	}
	if n := up.count("api.example.com"); n != 1 {
		t.Errorf("%d lookups, want 1", n)
	}
	clk.advance(DefaultTTL)
	ask(t, addr, "api.example.com.", dns.TypeA)
	if n := up.count("api.example.com"); n != 2 {
		t.Errorf("%d lookups after the TTL, want 2", n)
	}

	// Names outlive the TTL by the grace, then go.
	clk.advance(DefaultTTL + DefaultGrace - time.Second)
	if got := s.Names(netip.MustParseAddr("93.184.216.34")); len(got) != 1 {
		t.Errorf("Names within the grace: %v", got)
	}
	clk.advance(2 * time.Second)
	if got := s.Names(netip.MustParseAddr("93.184.216.34")); got != nil {
		t.Errorf("Names after the grace: %v", got)
	}
	if st := s.Stats(); st.Lookups != 2 || st.Denied != 0 || st.Answered != 8 {
		t.Errorf("stats %+v", st)
	}
}

// TestUnwantedNamesNeverLookedUp: no exfiltration through DNS. A name no
// endpoint could match, in any type, spelling or shape, is answered
// NXDOMAIN and reaches neither Lookup nor (when it is no host name) Wants.
func TestUnwantedNamesNeverLookedUp(t *testing.T) {
	var denied []string
	var mu sync.Mutex
	var wantsAsked []string
	s, addr := start(t, Config{
		Wants: func(name string) bool {
			mu.Lock()
			wantsAsked = append(wantsAsked, name)
			mu.Unlock()
			return wantsExample(name)
		},
		Lookup: func(_ context.Context, name string) ([]netip.Addr, error) {
			t.Errorf("Lookup(%q) called for an unwanted name", name)
			return nil, errors.New("no")
		},
		Denied: func(name string) {
			mu.Lock()
			denied = append(denied, name)
			mu.Unlock()
		},
	})
	names := []string{"secret-data.attacker.test.", "EXAMPLE.org.", "example.com.attacker.test.", "1.2.3.4.", "x\\000y.example.com.",
		"a\\.b.example.com.", "_.example.com.evil.", "."}
	for _, name := range names {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeANY, dns.TypeCNAME} {
			if r := ask(t, addr, name, qt); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
				t.Errorf("%s %s: %v", name, dns.Type(qt), r)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(denied) != len(names)*5 || denied[0] != "secret-data.attacker.test" || denied[5] != "example.org" {
		t.Errorf("Denied got %d names %q", len(denied), denied)
	}
	for _, w := range wantsAsked {
		if strings.Contains(w, "\\") || w == "1.2.3.4" || w == "" {
			t.Errorf("Wants asked about %q", w)
		}
	}
	if st := s.Stats(); st.Lookups != 0 || st.Denied != uint64(len(names)*5) {
		t.Errorf("stats %+v", st)
	}
}

func TestLookupFailures(t *testing.T) {
	up := &upstream{err: errors.New("resolver down")}
	s, addr := start(t, Config{Wants: wantsExample, Lookup: up.lookup, Denied: func(name string) { t.Errorf("Denied(%q)", name) }})
	for range 2 {
		if r := ask(t, addr, "api.example.com.", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
			t.Errorf("failing lookup: %v", r)
		}
	}
	if n := up.count("api.example.com"); n != 2 {
		t.Errorf("a failure is cached: %d lookups, want 2", n)
	}
	up.mu.Lock()
	up.err = nil
	up.table = map[string][]netip.Addr{"v6only.example.com": {netip.MustParseAddr("2001:db8::1")}}
	up.mu.Unlock()
	if r := ask(t, addr, "gone.example.com.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("a name the resolver does not find: %v", r)
	}
	if r := ask(t, addr, "v6only.example.com.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("a name without IPv4 addresses: %v", r)
	}
	if st := s.Stats(); st.Failed != 2 || st.NotFound != 1 || st.Denied != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestConcurrentQueriesShareOneLookup: queries for a name whose lookup is
// in flight wait for it rather than start their own.
func TestConcurrentQueriesShareOneLookup(t *testing.T) {
	const n = 16
	release := make(chan struct{})
	var lookups atomic.Int32
	joined := make(chan struct{}, n)
	_, addr := start(t, Config{Wants: wantsExample, Lookup: func(ctx context.Context, name string) ([]netip.Addr, error) {
		lookups.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}}, func(s *Server) { s.onJoin = func() { joined <- struct{}{} } })

	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if r := ask(t, addr, "api.example.com.", dns.TypeA); len(r.Answer) != 1 {
				t.Errorf("answer %v", r)
			}
		})
	}
	deadline := time.After(5 * time.Second)
	for range n - 1 {
		select {
		case <-joined:
		case <-deadline:
			t.Fatal("queries did not join the lookup in flight")
		}
	}
	close(release)
	wg.Wait()
	if got := lookups.Load(); got != 1 {
		t.Errorf("%d lookups, want 1", got)
	}
}

// TestStrictQueries: what is not one IN question in a QUERY is refused.
func TestStrictQueries(t *testing.T) {
	up := &upstream{table: map[string][]netip.Addr{"api.example.com": {netip.MustParseAddr("93.184.216.34")}}}
	s, addr := start(t, Config{Wants: wantsExample, Lookup: up.lookup})

	two := new(dns.Msg)
	two.SetQuestion("api.example.com.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "other.example.com.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	none := new(dns.Msg)
	none.Id = dns.Id()
	chaos := new(dns.Msg)
	chaos.SetQuestion("version.bind.", dns.TypeTXT)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	notify := new(dns.Msg)
	notify.SetNotify("example.com.")
	withAnswer := new(dns.Msg)
	withAnswer.SetQuestion("api.example.com.", dns.TypeA)
	withAnswer.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "api.example.com.", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.IPv4(1, 2, 3, 4)}}
	withExtra := new(dns.Msg)
	withExtra.SetQuestion("api.example.com.", dns.TypeA)
	withExtra.Extra = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: "x.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{"data"}}}
	edns1 := new(dns.Msg)
	edns1.SetQuestion("api.example.com.", dns.TypeA)
	edns1.SetEdns0(4096, false)
	edns1.IsEdns0().SetVersion(1)

	for _, c := range []struct {
		name  string
		m     *dns.Msg
		rcode int
	}{
		{"two questions", two, dns.RcodeFormatError},
		{"no question", none, dns.RcodeFormatError},
		{"class CH", chaos, dns.RcodeRefused},
		{"opcode NOTIFY", notify, dns.RcodeNotImplemented},
		{"an answer section", withAnswer, dns.RcodeFormatError},
		{"a TXT in additional", withExtra, dns.RcodeFormatError},
		{"EDNS version 1", edns1, dns.RcodeBadVers},
	} {
		if r := exchange(t, addr, c.m); r.Rcode != c.rcode || len(r.Answer) != 0 {
			t.Errorf("%s: %s, want %s: %v", c.name, dns.RcodeToString[r.Rcode], dns.RcodeToString[c.rcode], r)
		}
	}

	// EDNS 0: answered, with an OPT of our own.
	m := new(dns.Msg)
	m.SetQuestion("api.example.com.", dns.TypeA)
	m.SetEdns0(4096, true)
	if r := exchange(t, addr, m); len(r.Answer) != 1 || r.IsEdns0() == nil || r.IsEdns0().UDPSize() != ednsSize {
		t.Errorf("EDNS 0: %v", r)
	}
	if up.count("api.example.com") != 1 {
		t.Errorf("lookups %v: only the EDNS 0 query should look up", up.calls)
	}

	// Raw packets: a response and a short packet are dropped, garbage
	// after a header is FORMERR.
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp := new(dns.Msg)
	resp.SetQuestion("api.example.com.", dns.TypeA)
	resp.Response = true
	resp.Id = 1
	respBytes, _ := resp.Pack()
	garbage := []byte{0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff}
	for _, pkt := range [][]byte{respBytes, {1, 2, 3}, garbage} {
		if _, err := conn.Write(pkt); err != nil {
			t.Fatal(err)
		}
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil || r.Id != 0xabcd || r.Rcode != dns.RcodeFormatError {
		t.Errorf("garbage: %v %v", r, err)
	}
	// Nothing else comes: the next answer is the next query's.
	q := new(dns.Msg)
	q.SetQuestion("api.example.com.", dns.TypeA)
	qb, _ := q.Pack()
	conn.Write(qb)
	n, err = conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Unpack(buf[:n]); err != nil || r.Id != q.Id {
		t.Errorf("a dropped packet was answered: %v %v", r, err)
	}
	if st := s.Stats(); st.Malformed != 7 {
		t.Errorf("stats %+v, want 7 malformed (5 FORMERR, 2 dropped)", st)
	}
}

// TestBounds: the cache and the names remembered stay within their
// bounds, evicting the oldest.
func TestBounds(t *testing.T) {
	up := &upstream{table: map[string][]netip.Addr{}}
	for i, n := range []string{"a", "b", "c", "d"} {
		up.table[n+".example.com"] = []netip.Addr{netip.AddrFrom4([4]byte{93, 184, 216, byte(i)})}
	}
	up.table["shared.example.com"] = []netip.Addr{netip.AddrFrom4([4]byte{93, 184, 216, 3})}
	s, err := New(Config{Wants: wantsExample, Lookup: up.lookup, MaxNames: 2, MaxAddrs: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c", "a"} {
		if _, _, err := s.lookup(ctx, n+".example.com"); err != nil {
			t.Fatal(err)
		}
	}
	if n := up.count("a.example.com"); n != 2 {
		t.Errorf("a.example.com looked up %d times, want 2 (evicted by c)", n)
	}
	if len(s.answers.byKey) != 2 || s.answers.order.Len() != 2 {
		t.Errorf("cache holds %d names", len(s.answers.byKey))
	}
	// Addresses: a (.0) answered last, b (.1) evicted by c (.2), then d
	// and shared share .3 and evict .2 and .0 in turn.
	if s.Names(netip.MustParseAddr("93.184.216.1")) != nil || s.Names(netip.MustParseAddr("93.184.216.0")) == nil {
		t.Error("the address answered least recently was not the one evicted")
	}
	s.lookup(ctx, "d.example.com")
	s.lookup(ctx, "shared.example.com")
	if got := s.Names(netip.MustParseAddr("93.184.216.3")); !slices.Equal(got, []string{"shared.example.com", "d.example.com"}) {
		t.Errorf("Names = %v, want the most recent first", got)
	}
	if len(s.names.byAddr) != 2 || s.names.order.Len() != 2 {
		t.Errorf("memory holds %d addresses", len(s.names.byAddr))
	}
}

func TestNewAndServe(t *testing.T) {
	if _, err := New(Config{Wants: wantsExample}); err == nil {
		t.Error("New without Lookup succeeded")
	}
	if _, err := New(Config{Wants: wantsExample, Lookup: (&upstream{}).lookup, TTL: -1}); err == nil {
		t.Error("New with a negative TTL succeeded")
	}
	s, err := New(Config{Wants: wantsExample, Lookup: (&upstream{}).lookup})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := s.Serve(context.Background(), conn); err == nil {
		t.Error("Serve on a closed socket returned nil")
	}
}
