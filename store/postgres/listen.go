package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// errClosed ends ListenPolicyCommits when the store is closed first.
var errClosed = errors.New("postgres: store closed")

// ListenPolicyCommits calls fn with each policy version committed through
// any store on this database (NOTIFY is delivered at commit, and only for
// transactions that commit). It listens on a dedicated connection outside
// the pool, and after an error reconnects with capped exponential backoff;
// notifications sent meanwhile are lost. fn runs on the listening
// goroutine, one call at a time: it should return quickly.
//
// It returns ctx's error when ctx ends. Close stops it too (it then
// returns an error saying the store is closed) and waits for it to
// release its connection.
func (s *Store) ListenPolicyCommits(ctx context.Context, fn func(sandbox string, version int64)) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	s.listeners.Add(1)
	s.mu.Unlock()
	defer s.listeners.Done()

	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-lctx.Done():
		}
	}()
	stopped := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if lctx.Err() != nil {
			return errClosed
		}
		return nil
	}

	backoff := listenBackoffMin
	for {
		err := s.listen(lctx, fn, func() { backoff = listenBackoffMin })
		if err := stopped(); err != nil {
			return err
		}
		s.log.Warn("policy commit listener failed; reconnecting", "error", err, "after", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-lctx.Done():
			t.Stop()
			return stopped()
		case <-t.C:
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// listen connects, LISTENs and delivers notifications until an error;
// listening is called once the LISTEN took effect.
func (s *Store) listen(ctx context.Context, fn func(string, int64), listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
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
	s.log.Info("listening for policy commits")
	listening()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdleCheck)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if n != nil && n.Channel == policyChannel {
			if sandbox, version, ok := parsePolicyPayload(n.Payload); ok {
				fn(sandbox, version)
			} else {
				s.log.Warn("policy commit notification with a malformed payload", "payload", n.Payload)
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
