package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// policyChannel is the NOTIFY channel of committed policy versions. Its
// payload is "SANDBOX:VERSION" (policyPayload).
const policyChannel = "portcullis_policy"

// Reconnection backoff of ListenPolicyCommits: doubling from the first to
// the cap, back to the first once a connection listens again.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// A listening connection idle this long is pinged (answer within
// listenPingTimeout), so one a firewall or NAT dropped silently is
// replaced instead of waiting for notifications forever. Variables for
// tests.
var (
	listenIdleCheck   = 30 * time.Second
	listenPingTimeout = 10 * time.Second
)

func policyPayload(sandbox string, version int64) string {
	return sandbox + ":" + strconv.FormatInt(version, 10)
}

// parsePolicyPayload splits a payload at its last ':' (the version has
// none, so a sandbox name containing one still parses).
func parsePolicyPayload(p string) (sandbox string, version int64, ok bool) {
	i := strings.LastIndexByte(p, ':')
	if i <= 0 {
		return "", 0, false
	}
	v, err := strconv.ParseInt(p[i+1:], 10, 64)
	if err != nil || v <= 0 {
		return "", 0, false
	}
	return p[:i], v, true
}

// errClosed ends ListenPolicyCommits when the driver is closed first.
var errClosed = errors.New("postgres: store closed")

// ListenPolicyCommits calls fn, one call at a time, with each policy
// version committed: through this driver from store.CommitFeed (InTx
// publishes after each commit, as on SQLite), through any other driver on
// this database by LISTEN/NOTIFY (InsertPolicyVersion notifies in the
// committing transaction; delivered only if it commits). A NOTIFY sent by
// one of this driver's pool connections was announced in process already
// and is skipped, by backend pid. Still, a listener must tolerate hearing
// a version twice (a pooler hiding pids) and missing one (a full buffer;
// notifications sent while the LISTEN connection, outside the pool, is
// down and reconnecting with capped exponential backoff): listeners
// compare versions, and re-check them now and then.
//
// It returns ctx's error when ctx ends. Close stops it too (it then
// returns an error saying the store is closed) and waits for it to
// release its connection.
func (d *Driver) ListenPolicyCommits(ctx context.Context, fn func(sandbox string, version int64)) error {
	d.mu.Lock()
	if d.closing.Err() != nil {
		d.mu.Unlock()
		return errClosed
	}
	d.listeners.Add(1)
	d.mu.Unlock()
	defer d.listeners.Done()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.closing, cancel)()

	// fn hears both halves, one call at a time.
	var mu sync.Mutex
	call := func(sandbox string, version int64) {
		mu.Lock()
		defer mu.Unlock()
		fn(sandbox, version)
	}
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		d.listenRemote(lctx, call)
	}()
	_ = d.feed.Listen(lctx, call) // until lctx ends
	<-listening
	if err := ctx.Err(); err != nil {
		return err
	}
	return errClosed
}

// listenRemote calls fn with the notifications of other drivers' commits
// until ctx ends, reconnecting after errors.
func (d *Driver) listenRemote(ctx context.Context, fn func(string, int64)) {
	backoff := listenBackoffMin
	for {
		err := d.listen(ctx, fn, func() { backoff = listenBackoffMin })
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("policy commit listener failed; reconnecting", "error", err, "after", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// listen connects, LISTENs and calls fn with each notification until an
// error; listening is called once the LISTEN took effect.
func (d *Driver) listen(ctx context.Context, fn func(string, int64), listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(c)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+policyChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	d.log.Info("listening for policy commits")
	listening()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdleCheck)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if n != nil && n.Channel == policyChannel {
			sandbox, version, ok := parsePolicyPayload(n.Payload)
			_, own := d.own.Load(n.PID) // then announced in process already
			switch {
			case !ok:
				d.log.Warn("policy commit notification with a malformed payload", "payload", n.Payload)
			case !own:
				fn(sandbox, version)
			}
		}
		switch {
		case err == nil:
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			// Idle for a while (a timed-out wait leaves the connection
			// usable): check it still answers.
			pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping: %w", err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}
