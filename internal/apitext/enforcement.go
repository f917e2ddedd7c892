package apitext

import (
	"fmt"
	"io"
	"strings"
	"time"

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

// EnforcementError says that not every connected proxy ACKed a version:
// one NACKed it, or some were still pending at the deadline (Timeout,
// set when it passed). It names the refusing proxies, each with its
// reason on one line, and the pending ones.
type EnforcementError struct {
	Enforcement *portcullisv1.Enforcement
	Timeout     time.Duration
}

func (err *EnforcementError) Error() string {
	e := err.Enforcement
	var nacked, pending []string
	for _, p := range e.GetProxies() {
		switch p.GetState() {
		case "nacked":
			nacked = append(nacked, fmt.Sprintf("%s (%s)", p.GetProxyId(), Clip(p.GetError(), 200)))
		case "pending":
			pending = append(pending, p.GetProxyId())
		}
	}
	var b strings.Builder
	if len(nacked) > 0 {
		fmt.Fprintf(&b, "version %d of sandbox %s refused by %s %s", e.GetVersion(), e.GetSandbox(), Plural(len(nacked), "proxy", "proxies"), strings.Join(nacked, ", "))
	} else {
		fmt.Fprintf(&b, "version %d of sandbox %s not enforced within %s", e.GetVersion(), e.GetSandbox(), err.Timeout)
	}
	if len(pending) > 0 {
		fmt.Fprintf(&b, "; still pending: %s", strings.Join(pending, ", "))
	}
	fmt.Fprintf(&b, " (%d of %d connected proxies ACKed)", e.GetAcked(), e.GetTotal())
	return b.String()
}

// Waited is the outcome of a wait for version of sandbox (what
// apiclient's AwaitEnforcement answered: e, timedOut, err) as an error:
// nil when every proxy the fleet knows ACKed it, or when there was none
// or no version (0) was committed (said on stderr: "nothing to wait
// for"), else err or an *EnforcementError naming the proxies.
func Waited(stderr io.Writer, sandbox string, version uint32, e *portcullisv1.Enforcement, timedOut bool, timeout time.Duration, err error) error {
	switch {
	case version == 0:
		fmt.Fprintf(stderr, "note: no version was committed: nothing to wait for\n")
	case err != nil: // the watch failed
		return err
	case timedOut:
		return &EnforcementError{Enforcement: e, Timeout: timeout}
	case e.GetNacked() > 0:
		return &EnforcementError{Enforcement: e}
	case e.GetTotal() == 0:
		fmt.Fprintf(stderr, "note: no proxy of sandbox %s is connected to a gateway replica or was seen in the last minute: version %d is committed, nothing to wait for\n", sandbox, version)
	}
	return nil
}
