//go:build drills

package proxy

import (
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

var cutFor = flag.Duration("drill.cut", 30*time.Second, "how long the cut drill cuts the proxy from the gateway")

// TestDrillCut cuts a proxy from its gateway for -drill.cut (30 s) through
// a TCP relay, once closing the path (reset) and once stalling it
// silently (blackhole), while the sandbox's policy changes through the
// gateway: first widened (the denied path allowed), then narrowed (the
// allowed path removed), then frozen (sandbox freeze: deny all). Requests
// through the proxy run the whole time.
//
// It asserts that during the cut the proxy enforces the last version it
// verified exactly — no request the last verified version denies is
// allowed (allowed_but_denied=0) and none it allows is denied
// (denied_but_allowed=0), and every request is answered; that the widened
// path is never allowed, before, during or after the cut (the proxy goes
// from its last verified version straight to the freeze); and that the
// freeze is enforced within 1 s of the proxy's reconnection (the first
// connection the relay passes after it is restored → the first request
// denied).
//
// Figures: the requests during the cut, the two counts, when the proxy
// noticed the cut, and restore → reconnect → first denial.
func TestDrillCut(t *testing.T) {
	for _, mode := range []cutMode{cutReset, cutBlackhole} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			cutDrill(t, mode, *cutFor)
		})
	}
}

func cutDrill(t *testing.T, mode cutMode, cutFor time.Duration) {
	dir := t.TempDir()
	up, port := upstream(t)
	gw := startGateway(t, filepath.Join(dir, "gateway"))
	tokenFile := gw.api.createSandbox(t, dir, restDoc(port, "allowed"))
	rl := startRelay(t, gw.addr)
	px := startProxy(t, rl.url(), tokenFile, filepath.Join(dir, "proxy"), "cut-"+mode.String(), nil, "--max-reconnect-delay", "1s")
	px.waitLog(t, 0, 30*time.Second, "version 1 applied", applied(1))
	px.waitStatus(t, up, "/allowed/x", 200, 10*time.Second)

	tr := drive(px, up, 5*time.Millisecond, "allowed", "denied")
	time.Sleep(time.Second)

	logFrom := px.logLen()
	cutAt := time.Now()
	rl.cut(mode)
	// The policy changes while the proxy cannot hear it.
	time.Sleep(cutFor / 10)
	gw.api.set(t, restDoc(port, "allowed", "denied")) // widened
	time.Sleep(cutFor / 10)
	gw.api.set(t, restDoc(port, "other")) // narrowed: allowed is gone
	time.Sleep(cutFor / 10)
	frozen := gw.api.freeze(t)
	time.Sleep(time.Until(cutAt.Add(cutFor)))
	restoredAt := rl.restore()

	first, ok := tr.firstAfter(restoredAt, 90*time.Second, func(o outcome) bool { return o.path == "allowed" && o.status == 403 })
	outcomes := tr.halt()
	if !ok {
		t.Fatalf("the freeze (version %d) was not enforced within 90s of restoring the path\n%s", frozen, px.log())
	}
	reconnectedAt := rl.reconnectedAt()
	appliedLine, _ := px.waitLog(t, logFrom, 10*time.Second, "the freeze applied", applied(frozen))

	var during, allowedButDenied, deniedButAllowed, unanswered, widened int
	for _, o := range outcomes {
		if o.path == "denied" && o.status == 200 {
			widened++
		}
		if o.sent.Before(cutAt) || !o.answered.Before(restoredAt) {
			continue
		}
		during++
		switch {
		case o.status == 0:
			unanswered++
			t.Errorf("request to /%s during the cut: no answer: %v", o.path, o.err)
		case o.path == "denied" && o.status != 403:
			allowedButDenied++
		case o.path == "allowed" && o.status != 200:
			deniedButAllowed++
		}
	}
	// When the proxy noticed: its stream ended after the cut began.
	noticed := "never"
	for _, l := range px.linesFrom(logFrom) {
		if l.msg == "policy stream ended; reconnecting" {
			noticed = fmt.Sprint(ms(l.at.Sub(cutAt)))
			break
		}
	}
	reconnectToDenied := first.answered.Sub(reconnectedAt)
	figure(t, "drill=cut mode=%s cut_s=%.0f requests_during_cut=%d allowed_but_denied=%d denied_but_allowed=%d unanswered=%d",
		mode, cutFor.Seconds(), during, allowedButDenied, deniedButAllowed, unanswered)
	figure(t, "drill=cut mode=%s cut_noticed_after_ms=%s restore_to_reconnect_ms=%d reconnect_to_applied_ms=%d reconnect_to_denied_ms=%d restore_to_denied_ms=%d",
		mode, noticed, ms(reconnectedAt.Sub(restoredAt)), ms(appliedLine.at.Sub(reconnectedAt)), ms(reconnectToDenied), ms(first.answered.Sub(restoredAt)))

	if allowedButDenied != 0 || deniedButAllowed != 0 {
		t.Errorf("during the cut the proxy strayed from its last verified version: %d allowed that it denies, %d denied that it allows", allowedButDenied, deniedButAllowed)
	}
	if widened != 0 {
		t.Errorf("the widened path was allowed %d times: the proxy never verified that version", widened)
	}
	if during < 100 {
		t.Errorf("only %d requests ran during the cut", during)
	}
	if reconnectedAt.IsZero() || reconnectToDenied > time.Second {
		t.Errorf("the freeze was enforced %v after the proxy reconnected (at %v); want within 1s", reconnectToDenied, reconnectedAt)
	}
}
