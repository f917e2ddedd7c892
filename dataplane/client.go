package dataplane

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/identity"
)

// client is the proxy's view of one client connection: its calling
// binary is looked up once, on first need.
type client struct {
	conn     net.Conn
	identify func(net.Conn) (identity.Caller, error) // Config.Caller; nil: watch
	// watch is who held the client's socket at accept, looked at only
	// when the policy then named binaries (it scans /proc); nil otherwise.
	watch  *identity.Watch
	log    *slog.Logger // why a caller is unknown, at debug level
	once   sync.Once
	caller identity.Caller
}

type clientKey struct{}

// connContext is the context of the requests on conn, a connection just
// accepted: it carries the proxy's view of the client (h1.Config.ConnContext).
func (p *Proxy) connContext(ctx context.Context, conn net.Conn) context.Context {
	return context.WithValue(ctx, clientKey{}, p.newClient(conn, netip.AddrPort{}))
}

// newClient starts the proxy's view of a connection just accepted, on the
// connection's goroutine. With the default identity and a policy that
// names binaries, it looks at who holds the client's socket now, to
// compare when the first request is judged. When the first request's
// head has already arrived, this look is also the one at judgement
// (identity.Follow's sent): a client that writes at once costs one pass
// over /proc, not two. orig is a transparent connection's original
// destination (invalid for the proxy listener's): its client socket is
// in the client's network namespace (identity.FollowRedirected).
func (p *Proxy) newClient(conn net.Conn, orig netip.AddrPort) *client {
	c := &client{conn: conn, identify: p.cfg.Caller, log: p.log}
	if c.identify == nil {
		if cur := p.current.Load(); cur != nil && cur.matcher.NamesBinaries() {
			if orig.IsValid() {
				c.watch = identity.FollowRedirected(conn, orig, h1.HeadSent(conn))
			} else {
				c.watch = identity.Follow(conn, h1.HeadSent(conn))
			}
		}
	}
	return c
}

// process is the client's caller, looked up when its first request is
// judged. With the default identity, a connection accepted while the
// policy named no binaries has no look from its accept to compare with:
// its caller is unknown (a client reconnects to be named).
func (c *client) process() identity.Caller {
	c.once.Do(func() {
		var (
			caller identity.Caller
			err    error
		)
		switch {
		case c.identify != nil:
			caller, err = c.identify(c.conn)
		case c.watch != nil:
			caller, err = c.watch.Caller()
		default:
			if c.log != nil {
				c.log.Debug("caller unknown: the policy named no binaries when the connection was accepted")
			}
			return
		}
		// An unknown binary ("") matches no rule that names binaries.
		if err == nil && caller.Binary != "" {
			c.caller = caller
		} else if c.log != nil {
			c.log.Debug("caller unknown", "err", err)
		}
	})
	return c.caller
}

func callerOf(ctx context.Context) identity.Caller {
	if c, ok := ctx.Value(clientKey{}).(*client); ok {
		return c.process()
	}
	return identity.Caller{}
}
