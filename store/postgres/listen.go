package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
)

// policyChannel is the NOTIFY channel of committed policy versions. Its
// payload is "SANDBOX:VERSION" (policyPayload).
const policyChannel = "portcullis_policy"

// Reconnection backoff of ListenPolicyCommits: doubling from the first to
// the cap, back to the first once a connection listens again.
// The cap bounds how long after the database is back a replica hears of
// commits again (and then at once of those it missed).
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 2 * time.Second
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

// currentVersions reads every sandbox's current version after the LISTEN.
const currentVersions = `SELECT /* portcullis_policy catch-up */ name, current_version FROM sandboxes WHERE current_version > 0`

// errClosed ends ListenPolicyCommits when the driver is closed first.
var errClosed = errors.New("postgres: store closed")

// ListenPolicyCommits calls fn, one call at a time, with each policy
// version committed: through this driver from store.CommitFeed (InTx
// publishes after each commit, as on SQLite), through any other driver on
// this database by LISTEN/NOTIFY (InsertPolicyVersion notifies in the
// committing transaction; delivered only if it commits). A NOTIFY sent by
// one of this driver's pool connections was announced in process already
// and is skipped, by backend pid. Still, a listener must tolerate hearing
// a version twice (a pooler hiding pids, a catch-up) and missing one (a
// full buffer): listeners compare versions, and re-check them now and
// then. The LISTEN connection, outside the pool, reconnects after an
// error with capped exponential backoff; once it listens again, every
// sandbox whose current version is newer than any fn heard is announced
// at its current version, so commits made while it was down (a database
// restart) are not left to the listeners' next check.
//
// It returns ctx's error when ctx ends. Close stops it too (it then
// returns an error saying the store is closed) and waits for it to
// release its connection.
func (d *Driver) ListenPolicyCommits(ctx context.Context, fn func(store.Commit)) error {
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

	// fn hears both halves, one call at a time; heard is the newest
	// version fn heard of each sandbox, caught those a catch-up
	// announced (the NOTIFY or the in-process announcement of the same
	// commit may follow: it is not repeated).
	var (
		mu            sync.Mutex
		heard, caught = map[string]int64{}, map[string]int64{}
	)
	call := func(c store.Commit) {
		mu.Lock()
		defer mu.Unlock()
		if v, ok := caught[c.Sandbox]; ok {
			delete(caught, c.Sandbox)
			if v == c.Version {
				return
			}
		}
		heard[c.Sandbox] = max(heard[c.Sandbox], c.Version)
		fn(c)
	}
	// catchUp takes the sandboxes' current versions, read once LISTEN
	// took effect: the first time as the baseline, after a reconnect to
	// announce what fn missed.
	catchUp := func(current map[string]int64, reconnected bool) {
		mu.Lock()
		defer mu.Unlock()
		clear(caught)
		for sb := range heard {
			if _, ok := current[sb]; !ok {
				delete(heard, sb) // deleted
			}
		}
		for _, sb := range slices.Sorted(maps.Keys(current)) {
			v := current[sb]
			if v != heard[sb] { // newer, or a sandbox made again
				heard[sb] = v
				if reconnected {
					caught[sb] = v
					fn(store.Commit{Sandbox: sb, Version: v})
				}
			}
		}
	}
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		d.listenRemote(lctx, call, catchUp)
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
func (d *Driver) listenRemote(ctx context.Context, fn func(store.Commit), catchUp func(map[string]int64, bool)) {
	backoff := listenBackoffMin
	reconnected := false
	for {
		err := d.listen(ctx, fn, func(current map[string]int64) {
			backoff = listenBackoffMin
			catchUp(current, reconnected)
			reconnected = true
		})
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
// error; listening is called once the LISTEN took effect, with every
// sandbox's current version read after it.
func (d *Driver) listen(ctx context.Context, fn func(store.Commit), listening func(current map[string]int64)) error {
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
	// Read once the LISTEN took effect (it did at its own commit): a
	// commit is in these versions or notified after, or both.
	rows, err := conn.Query(ctx, currentVersions)
	if err != nil {
		return fmt.Errorf("read current versions: %w", err)
	}
	current := map[string]int64{}
	var (
		name string
		v    int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &v}, func() error { current[name] = v; return nil }); err != nil {
		return fmt.Errorf("read current versions: %w", err)
	}
	d.log.Info("listening for policy commits")
	listening(current)
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
				fn(store.Commit{Sandbox: sandbox, Version: version})
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
