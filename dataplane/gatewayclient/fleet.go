package gatewayclient

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// The fleet: the gateway replicas a proxy may talk to. Every replica on
// one store serves the same versions, so a proxy needs only one at a time
// and may use any.
//
// The proxy is given URLs (several, or a DNS name with several addresses)
// and resolves each name itself into endpoints, one per address, again
// before every reconnection: a replica replaced behind a name is found by
// its new address. Each endpoint has its own gRPC connections, made on
// first use.
//
// The policy stream picks its endpoint (next): one that failed waits out
// a backoff of its own (full jitter, doubling per failure, reset by a
// stream that lasted), so a dead replica is retried slowly while the
// others are tried; a replica that said goaway is left at once for
// another. The next one is drawn at random among those ready, so the
// proxies of a replica that went away spread over the fleet. Decision shipping and the advisor relay call through a
// fleetConn: the stream's endpoint first, then each other one while the
// answer is Unavailable (refused, reset, draining).

// connKind names a connection of an endpoint: the gateway serves a
// connection whose first call is to DistributionService with a lighter
// server that serves nothing else, so that service has its own.
type connKind int

const (
	distConn connKind = iota // the policy stream and decision shipping
	apiConn                  // the rest (the advisor relay)
)

// target is one gateway URL as given.
type target struct {
	url        string // for messages
	https      bool
	host, port string // host without brackets
	literal    bool   // host is an IP address: nothing to resolve
}

// endpoint is one address of a target.
type endpoint struct {
	target *target
	addr   string // ip:port, or host:port when the name did not resolve
	// resolved: addr is an address; otherwise grpc-go resolves the name.
	resolved bool

	// Guarded by fleet.mu.
	conns     [2]*grpc.ClientConn
	backoff   time.Duration // the next failure's bound
	notBefore time.Time     // the policy stream waits until then
}

func (e *endpoint) key() string {
	if e.target.https {
		return "https://" + e.addr
	}
	return "http://" + e.addr
}

// String names the endpoint in logs: the URL given, and the address when
// the name was resolved.
func (e *endpoint) String() string {
	if e.target.literal || !e.resolved {
		return e.target.url
	}
	return e.target.url + " (" + e.addr + ")"
}

type fleet struct {
	targets  []*target
	dial     func(*endpoint, connKind) (*grpc.ClientConn, error)
	lookup   func(ctx context.Context, host string) ([]string, error)
	min, max time.Duration
	now      func() time.Time

	mu     sync.Mutex
	eps    []*endpoint // the last resolution, in the order of the URLs
	cur    *endpoint   // the policy stream's, preferred by the others
	closed bool
}

// parseTargets reads gateway URLs: http://HOST:PORT or https://HOST:PORT.
func parseTargets(urls []string) ([]*target, error) {
	if len(urls) == 0 {
		return nil, errors.New("no gateway URL")
	}
	var ts []*target
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("gateway URL %q: want http://HOST:PORT or https://HOST:PORT", raw)
		}
		t := &target{url: u.Scheme + "://" + u.Host, host: u.Hostname(), port: u.Port()}
		switch u.Scheme {
		case "http":
			t.port = cmp.Or(t.port, "80")
		case "https":
			t.https, t.port = true, cmp.Or(t.port, "443")
		default:
			return nil, fmt.Errorf("gateway URL %q: the scheme must be http or https", raw)
		}
		t.literal = net.ParseIP(t.host) != nil
		ts = append(ts, t)
	}
	return ts, nil
}

// CheckGatewayURLs refuses the gateway URLs a proxy must not send its
// sandbox token to: one with credentials, a path or a query, and a
// plaintext http:// one beyond loopback unless allowPlaintext (then it
// logs a warning; the messages name portcullis proxy's --insecure). It
// returns them as SubscribeConfig.Gateways takes them.
func CheckGatewayURLs(urls []*url.URL, allowPlaintext bool, log *slog.Logger) ([]string, error) {
	var gateways []string
	for _, u := range urls {
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("gateway URL %s: want http(s)://HOST:PORT, without credentials or a path", u.Redacted())
		}
		if u.Scheme == "http" && !LoopbackHost(u.Hostname()) {
			if !allowPlaintext {
				return nil, fmt.Errorf("refusing to send the sandbox token in plaintext to %s: use https://, or --insecure on a private network", u.Redacted())
			}
			log.Warn("--insecure: the sandbox token crosses the network in plaintext", "gateway", u.Redacted())
		}
		gateways = append(gateways, u.String())
	}
	return gateways, nil
}

// LoopbackHost reports whether host names this machine: localhost or a
// loopback address.
func LoopbackHost(host string) bool {
	ip, err := netip.ParseAddr(host)
	return host == "localhost" || err == nil && ip.IsLoopback()
}

// newFleet prepares the fleet; nothing is resolved or dialed yet.
func newFleet(cfg *SubscribeConfig) (*fleet, error) {
	urls := cfg.Gateways
	if cfg.Gateway != "" {
		urls = append([]string{cfg.Gateway}, urls...)
	}
	ts, err := parseTargets(urls)
	if err != nil {
		return nil, err
	}
	f := &fleet{targets: ts, min: cfg.MinBackoff, max: cfg.MaxBackoff, now: time.Now, lookup: net.DefaultResolver.LookupHost}
	f.dial = func(ep *endpoint, _ connKind) (*grpc.ClientConn, error) {
		var creds credentials.TransportCredentials = insecure.NewCredentials()
		if ep.target.https {
			creds = credentials.NewTLS(&tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12, ServerName: ep.target.host})
		}
		target := "passthrough:///" + ep.addr
		if !ep.resolved {
			target = "dns:///" + ep.addr
		}
		return grpc.NewClient(target,
			grpc.WithTransportCredentials(creds),
			// The name the URL gave, whatever address is dialed.
			grpc.WithAuthority(net.JoinHostPort(ep.target.host, ep.target.port)),
			grpc.WithPerRPCCredentials(bearer{token: cfg.Token}),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
			// The channel's own reconnect waits follow the same bounds as the
			// stream's (grpc-go's default grows to two minutes).
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: cfg.MinBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: cfg.MaxBackoff},
				MinConnectTimeout: minConnectTimeout,
			}),
		)
	}
	return f, nil
}

// resolve refreshes the endpoints: each name looked up again (a failed
// lookup keeps the name's previous endpoints, or lets grpc-go resolve
// it), endpoints that stay keep their connections and backoff, and the
// connections of those gone are closed (unless the stream still uses
// one: it is closed with the fleet).
func (f *fleet) resolve(ctx context.Context) {
	type found struct {
		addrs []string
		err   error
	}
	res := make([]found, len(f.targets))
	for i, t := range f.targets {
		if t.literal {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res[i].addrs, res[i].err = f.lookup(lctx, t.host)
		cancel()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	old := make(map[string]*endpoint, len(f.eps))
	for _, ep := range f.eps {
		old[ep.key()] = ep
	}
	var eps []*endpoint
	seen := map[string]bool{}
	add := func(ep *endpoint) {
		if seen[ep.key()] {
			return // two URLs naming one address
		}
		seen[ep.key()] = true
		if kept := old[ep.key()]; kept != nil {
			ep = kept
			delete(old, ep.key())
		}
		eps = append(eps, ep)
	}
	for i, t := range f.targets {
		switch {
		case t.literal:
			add(&endpoint{target: t, addr: net.JoinHostPort(t.host, t.port), resolved: true})
		case res[i].err != nil || len(res[i].addrs) == 0:
			kept := false
			for _, ep := range f.eps {
				if ep.target == t {
					add(ep)
					kept = true
				}
			}
			if !kept {
				add(&endpoint{target: t, addr: net.JoinHostPort(t.host, t.port)})
			}
		default:
			for _, a := range res[i].addrs {
				add(&endpoint{target: t, addr: net.JoinHostPort(a, t.port), resolved: true})
			}
		}
	}
	f.eps = eps
	for _, ep := range old {
		if ep != f.cur {
			closeConns(ep)
		}
	}
}

func closeConns(ep *endpoint) error {
	var errs []error
	for i, c := range ep.conns {
		if c != nil {
			errs = append(errs, c.Close())
			ep.conns[i] = nil
		}
	}
	return errors.Join(errs...)
}

// conn returns ep's connection of kind, made on first use.
func (f *fleet) conn(ep *endpoint, kind connKind) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, status.Error(codes.Canceled, "the gateway connections are closed")
	}
	if c := ep.conns[kind]; c != nil {
		return c, nil
	}
	c, err := f.dial(ep, kind)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", ep, err)
	}
	ep.conns[kind] = c
	return c, nil
}

// first returns the endpoint of the first policy stream: one at random,
// so that a fleet's proxies spread over the replicas.
func (f *fleet) first(ctx context.Context) *endpoint {
	f.resolve(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = f.eps[rand.IntN(len(f.eps))]
	return f.cur
}

// ended records how the policy stream on ep ended: asked to go away,
// after it lasted a good while, or otherwise (it failed).
func (f *fleet) ended(ep *endpoint, goaway, lasted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if goaway || lasted || ep.backoff == 0 {
		ep.backoff = f.min
	}
	// A draining replica is left for the others; alone, it is asked again
	// after a short wait, as one that failed.
	ep.notBefore = now.Add(jitter(ep.backoff))
	if !goaway {
		ep.backoff = min(2*ep.backoff, f.max)
	}
}

// next picks the endpoint of the next policy stream after one on from
// ended, and how long to wait before it: one at random among those whose
// backoff is over (from last: only if no other is ready), so that the
// proxies of a replica that went away spread over the others rather than
// all land on one; else the one whose backoff ends soonest. After a
// goaway an endpoint ready now is used at once; otherwise a short random
// wait (up to the minimum backoff) spreads them over the first moments
// too.
func (f *fleet) next(ctx context.Context, from *endpoint, goaway bool) (*endpoint, time.Duration) {
	f.resolve(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	var ready []*endpoint
	for _, ep := range f.eps {
		if ep != from && !ep.notBefore.After(now) {
			ready = append(ready, ep)
		}
	}
	var best *endpoint
	if len(ready) > 0 {
		best = ready[rand.IntN(len(ready))]
	} else {
		start := slices.Index(f.eps, from) + 1 // 0 if from is gone: from comes last
		for i := range f.eps {
			ep := f.eps[(start+i)%len(f.eps)]
			if best == nil || ep.notBefore.Before(best.notBefore) {
				best = ep
			}
		}
	}
	if f.cur != nil && f.cur != best && !slices.Contains(f.eps, f.cur) {
		closeConns(f.cur) // gone from the names' addresses, and no longer used
	}
	f.cur = best
	wait := max(best.notBefore.Sub(now), 0)
	if wait == 0 && !goaway {
		wait = jitter(f.min)
	}
	return best, wait
}

// order is the endpoints a call tries, in turn: the policy stream's
// first, then the others in the order given after it.
func (f *fleet) order(ctx context.Context) []*endpoint {
	f.mu.Lock()
	if len(f.eps) == 0 {
		f.mu.Unlock()
		f.resolve(ctx)
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	start := max(slices.Index(f.eps, f.cur), 0)
	out := make([]*endpoint, 0, len(f.eps))
	for i := range f.eps {
		out = append(out, f.eps[(start+i)%len(f.eps)])
	}
	return out
}

// close closes every connection; calls after it fail.
func (f *fleet) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	var errs []error
	for _, ep := range f.eps {
		errs = append(errs, closeConns(ep))
	}
	if f.cur != nil && !slices.Contains(f.eps, f.cur) {
		errs = append(errs, closeConns(f.cur))
	}
	return errors.Join(errs...)
}

// jitter is a random wait in (0, d] (full jitter).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d))) + 1
}

// fleetConn is a grpc.ClientConnInterface over the fleet: each call goes
// to the policy stream's endpoint, then to each other one while the
// answer is Unavailable (nothing reached a replica that could serve it,
// or the replica went away during the call: a call may then reach two
// replicas, which shipping (at least once) and proposals (deduplicated)
// allow). A stream is only moved while it opens.
type fleetConn struct {
	f    *fleet
	kind connKind
}

func (c fleetConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	var err error
	for _, ep := range c.f.order(ctx) {
		var cc *grpc.ClientConn
		if cc, err = c.f.conn(ep, c.kind); err != nil {
			return err
		}
		err = cc.Invoke(ctx, method, args, reply, opts...)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (c fleetConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	var err error
	for _, ep := range c.f.order(ctx) {
		var cc *grpc.ClientConn
		if cc, err = c.f.conn(ep, c.kind); err != nil {
			return nil, err
		}
		var st grpc.ClientStream
		st, err = cc.NewStream(ctx, desc, method, opts...)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return st, err
		}
	}
	return nil, err
}
