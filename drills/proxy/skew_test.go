//go:build drills

package proxy

import (
	"path/filepath"
	"testing"
	"time"
)

// TestDrillClockSkew runs a proxy whose clock is five minutes behind the
// gateway's, and one five minutes ahead (PORTCULLIS_DRILL_CLOCK_OFFSET,
// drill builds only), each given a grant (an allow rule with expires_at
// a few seconds away by the gateway's clock) and then cut from the
// gateway before the grant ends, so neither the gateway's expiry sweep
// nor any push can help: the proxy judges alone.
//
// It asserts that the grant ends no later than the gateway says: no
// request sent at or after expires_at (the host's clock, which is the
// gateway's) is allowed; that the rule without an end stays allowed
// throughout; and that the proxy said in its log that the clocks differ.
//
// Figures: the gateway's clock as the proxy estimated it, the last
// request allowed and the first denied relative to expires_at.
func TestDrillClockSkew(t *testing.T) {
	for _, skew := range []time.Duration{-5 * time.Minute, 5 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel()
			skewDrill(t, skew)
		})
	}
}

func skewDrill(t *testing.T, skew time.Duration) {
	dir := t.TempDir()
	up, port := upstream(t)
	gw := startGateway(t, filepath.Join(dir, "gateway"))
	tokenFile := gw.api.createSandbox(t, dir, restDoc(port, "base"))
	rl := startRelay(t, gw.addr)
	px := startProxy(t, rl.url(), tokenFile, filepath.Join(dir, "proxy"), "skew", []string{"PORTCULLIS_DRILL_CLOCK_OFFSET=" + skew.String()})
	px.waitLog(t, 0, 30*time.Second, "version 1 applied", applied(1))
	// The first heartbeat's answer tells the proxy the gateway's clock.
	clockLine, _ := px.waitLog(t, 0, 30*time.Second, "about the clocks", func(l logLine) bool {
		return l.msg == "the gateway's clock differs from the proxy's; expires_at is judged by the later of the two"
	})

	expiresAt := time.Now().Truncate(time.Second).Add(6 * time.Second)
	doc := restDoc(port, "base") + restDocWith(port, `, expires_at: "`+expiresAt.UTC().Format(time.RFC3339)+`"`, "grant")[len("version: 1\nnetwork_policies:\n"):]
	v2 := gw.api.set(t, doc)
	px.waitLog(t, 0, 10*time.Second, "the grant applied", applied(v2))
	rl.cut(cutReset)

	tr := drive(px, up, 5*time.Millisecond, "grant", "base")
	time.Sleep(time.Until(expiresAt.Add(2 * time.Second)))
	outcomes := tr.halt()

	var lastAllowed, firstDenied time.Time
	var lateAllowed, baseDenied, grantAllowed int
	for _, o := range outcomes {
		switch {
		case o.status == 0:
			t.Errorf("request to /%s: no answer: %v", o.path, o.err)
		case o.path == "base" && o.status != 200:
			baseDenied++
		case o.path == "grant" && o.status == 200:
			grantAllowed++
			lastAllowed = o.sent
			if !o.sent.Before(expiresAt) {
				lateAllowed++
			}
		case o.path == "grant" && firstDenied.IsZero():
			firstDenied = o.answered
		}
	}
	rel := func(at time.Time) any {
		if at.IsZero() {
			return "none"
		}
		return ms(at.Sub(expiresAt))
	}
	figure(t, "drill=skew proxy_clock_offset=%s gateway_ahead_estimate=%v grant_allowed=%d allowed_after_expiry=%d last_allowed_ms=%v first_denied_ms=%v",
		skew, clockLine.attr["gateway_ahead"], grantAllowed, lateAllowed, rel(lastAllowed), rel(firstDenied))
	if lateAllowed != 0 {
		t.Errorf("%d requests sent at or after expires_at were allowed (last sent %v after it)", lateAllowed, lastAllowed.Sub(expiresAt))
	}
	if firstDenied.IsZero() {
		t.Errorf("the grant was never denied\n%s", px.log())
	}
	if baseDenied != 0 {
		t.Errorf("the rule without an end was denied %d times", baseDenied)
	}
}
