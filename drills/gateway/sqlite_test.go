//go:build drills

package gateway

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestSQLiteKill9DuringWrites: a gateway on its embedded SQLite store
// (the default, --data-dir), three setters writing policy versions as
// fast as it answers; the gateway gets SIGKILL mid-write and is started
// again on the same data directory, while the writers go on (twice; ten
// times in the long variant).
//
// Asserts: the store opens after every kill (the gateway serves and is
// ready), the audit chain verifies, every acked write is in the history
// at the version answered, versions run without gaps, no document is
// stored twice, and every version has its audit entry. Prints the time
// from restart to ready per kill, and the counts.
func TestSQLiteKill9DuringWrites(t *testing.T) {
	kills, running := 2, 2*time.Second
	if long() {
		kills, running = 10, 5*time.Second
	}
	data := filepath.Join(t.TempDir(), "data")
	g := newGateway(t, "gateway", []string{"PORTCULLIS_DATABASE_URL="}, "--data-dir", data)
	g.start()
	admin := newClient(g.url, adminToken)
	bu := &burst{t: t, replicas: []*gateway{g}, tokens: map[string]string{}, setters: 3}
	for i := range 3 {
		sb := fmt.Sprintf("lite-%d", i)
		bu.sandboxes = append(bu.sandboxes, sb)
		bu.tokens[sb] = createSandbox(t, admin, sb, setDoc("init", i))
	}

	ctx, stop := context.WithCancel(t.Context())
	wg := bu.run(ctx)
	var converge durations
	for k := range kills {
		time.Sleep(running)
		opsAtKill := bu.ops.Load()
		g.kill9()
		took := g.restart()
		converge = append(converge, took)
		figure(t, "sqlite", "kill", k+1, "ops_before_kill", opsAtKill, "converge_ms", took.Milliseconds())
	}
	time.Sleep(running)
	stop()
	wg.Wait()
	for k, v := range bu.led.errorKinds() {
		t.Logf("errored calls %s: %s", k, v)
	}
	g.internalErrors(t)

	settle(t, admin)
	h := readHistory(t, admin, bu.sandboxes)
	c := h.verify(&bu.led)
	for _, p := range c.problems {
		t.Error(p)
	}
	ackedSets, errSets, _, _ := bu.led.counts()
	figure(t, "sqlite", "acked", ackedSets, "found", c.foundSets, "errored", errSets, "errored_committed", c.erroredCommitted,
		"errored_absent", c.erroredAbsent, "versions", c.versions, "audit_entries", h.auditEntries, "audit_verified", true)
	figure(t, "sqlite", "converge", converge.summary())
	figure(t, "sqlite", "acked_latency", bu.led.latency.summary())
	if ackedSets == 0 {
		t.Error("no write was acked: the drill exercised nothing")
	}
}
