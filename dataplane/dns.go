package dataplane

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/portcullis-dev/portcullis/dataplane/sandboxdns"
)

// ListenTransparent opens a transparent listener's sockets on addr: TCP
// for the redirected connections (Listeners.Transparent) and UDP on the
// same address and port for the sandbox's DNS (Listeners.DNS). addr must
// be a specific address: a DNS answer must come from the address its
// query was redirected to, which a socket on every address does not
// promise.
func ListenTransparent(addr string) (net.Listener, net.PacketConn, error) {
	if ap, err := netip.ParseAddrPort(addr); err != nil || ap.Addr().IsUnspecified() {
		return nil, nil, fmt.Errorf("%s: want a specific IP address and port, e.g. 127.0.0.1:3129 (the sandbox's DNS is answered from it)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String()) // port 0 resolved: the same port
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("UDP (the sandbox's DNS): %w", err)
	}
	return ln, pc, nil
}

// Listen opens a proxy's Listeners: the proxy's on addr and, when
// transparent is set, the transparent listener's sockets there
// (ListenTransparent). On failure nothing stays open; the error says
// which address failed, "transparent" for the second.
func Listen(addr, transparent string) (Listeners, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return Listeners{}, fmt.Errorf("listen on %s: %w", addr, err)
	}
	l := Listeners{Proxy: ln}
	if transparent != "" {
		if l.Transparent, l.DNS, err = ListenTransparent(transparent); err != nil {
			ln.Close()
			return Listeners{}, fmt.Errorf("transparent listener: %w", err)
		}
	}
	return l, nil
}

// Close closes the listeners l holds (those that are set), for a proxy
// that will not serve them.
func (l Listeners) Close() {
	if l.Proxy != nil {
		l.Proxy.Close()
	}
	if l.Transparent != nil {
		l.Transparent.Close()
	}
	if l.DNS != nil {
		l.DNS.Close()
	}
}

// newDNS is the sandbox's DNS on the transparent side (sandboxdns): it
// answers the names some endpoint of the policy in force could match,
// from Config.Resolve, and every other name NXDOMAIN without asking
// anyone. What it answered is the NameBook transparent connections are
// judged by. A refused name is not a decision record: it names no port,
// and the advisor would draft a rule from it.
func (a *Agent) newDNS() (*sandboxdns.Server, error) {
	return sandboxdns.New(sandboxdns.Config{
		Wants: func(name string) bool {
			cur := a.current.Load()
			return cur != nil && cur.matcher.WantsName(name)
		},
		Lookup: a.Proxy.cfg.Resolve,
		Denied: func(name string) { a.log.Debug("DNS: no endpoint matches the name; answered NXDOMAIN", "name", name) },
		Logger: a.log,
	})
}
