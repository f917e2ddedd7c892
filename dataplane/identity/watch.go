package identity

import (
	"errors"
	"net"
	"net/netip"
)

var errHoldersChanged = errors.New("the processes holding the socket changed since the connection was accepted")

// Watch follows who holds one connection's client socket, from accept to
// the moment a request on it is judged: a request is the work of an
// executable only if that executable held the socket all along, as far as
// two looks at /proc can tell (Follow, then Caller).
//
// What it cannot see: a process that gave its socket away for good (let a
// child running another executable inherit it, then closed its own copy
// or exited) before the proxy's first look. The kernel keeps no record of
// who made a socket or wrote on it (SO_PEERCRED names no process for TCP);
// the holders are all there is. A copy kept in flight to be taken back for
// the answer is seen (socketHolders), whenever it was sent.
type Watch struct {
	look  func() (sighting, error)
	first sighting
	sent  bool
	err   error
}

// Follow looks at the holders of conn's client socket now: call it when
// the connection is accepted. It costs what Of costs (a pass over /proc).
// sent says the request to be judged first had been written in full
// before this look began (the proxy peeked at the socket): the look is
// then also the one at judgement, and Caller makes no other.
func Follow(conn net.Conn, sent bool) *Watch {
	return follow(func() (sighting, error) { return look(conn) }, sent)
}

// FollowRedirected is Follow for a connection the kernel redirected to
// the proxy (a transparent listener's), whose client socket is in the
// client's network namespace: see OfRedirected.
func FollowRedirected(conn net.Conn, orig netip.AddrPort, sent bool) *Watch {
	return follow(func() (sighting, error) { return lookRedirected(conn, orig) }, sent)
}

func follow(look func() (sighting, error), sent bool) *Watch {
	s, err := look()
	return &Watch{look: look, first: s, sent: sent, err: err}
}

// Caller looks again and returns the caller as Of does, if the same
// processes (pid, start time and executable) hold the socket as when
// Follow looked. Otherwise the caller is unknown: a holder that exited,
// exec'd another executable or let go of the socket, a new one (a copy
// received or inherited), a pid now naming another process. A caller
// unknown at accept stays unknown.
func (w *Watch) Caller() (Caller, error) {
	if w.err != nil {
		return Caller{}, w.err
	}
	if w.sent {
		return w.first.caller(), nil
	}
	now, err := w.look()
	if err != nil {
		return Caller{}, err
	}
	if !w.first.same(now) {
		return Caller{}, now.errorf(errHoldersChanged)
	}
	return now.caller(), nil
}
