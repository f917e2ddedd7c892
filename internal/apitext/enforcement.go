package apitext

import (
	"fmt"
	"io"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Enforcement writes to w where a version stands: "version 5 enforced by 2
// of 2 connected proxies in 14 ms", then each proxy that did not ACK.
func Enforcement(w io.Writer, e *portcullisv1.Enforcement) {
	if e.GetTotal() == 0 {
		return // said on stderr
	}
	line := fmt.Sprintf("version %d enforced by %d of %d connected %s", e.GetVersion(), e.GetAcked(), e.GetTotal(), Plural(int(e.GetTotal()), "proxy", "proxies"))
	if e.GetAcked() == e.GetTotal() && e.GetMs() > 0 {
		line += fmt.Sprintf(" in %d ms", e.GetMs())
	}
	fmt.Fprintln(w, line)
	for _, p := range e.GetProxies() {
		switch p.GetState() {
		case "nacked":
			fmt.Fprintf(w, "  %s  refused it: %s\n", p.GetProxyId(), OneLine(p.GetError()))
		case "pending":
			fmt.Fprintf(w, "  %s  pending (enforces version %d)\n", p.GetProxyId(), p.GetAppliedVersion())
		}
	}
}
