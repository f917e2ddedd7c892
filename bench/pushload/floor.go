package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
)

// The floor: this process writes the pushed message's bytes to n plain
// TCP connections (one per reader in the clients process, no HTTP/2, no
// gRPC), and each reader answers with one byte once it has read them all,
// as a proxy answers a version with an ACK. Writes come from GOMAXPROCS
// goroutines, each taking its share of the connections in turn: what the
// process needs at the least to put the same bytes on n sockets.

type tcpFloor struct {
	ln    net.Listener
	conns []net.Conn
	wg    sync.WaitGroup
	mu    sync.Mutex
	cur   *collect // the round in progress, read by the reply readers
}

// openFloor accepts n connections from the clients process.
func openFloor(ch *child, n, size, concurrency int, timeout time.Duration) (*tcpFloor, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &tcpFloor{ln: ln, conns: make([]net.Conn, 0, n)}
	accepted := make(chan error, 1)
	go func() {
		for len(f.conns) < n {
			conn, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			f.conns = append(f.conns, conn)
		}
		accepted <- nil
	}()
	if _, err := ch.call(request{Op: opTCPConnect, Addr: ln.Addr().String(), N: n, Size: size, Concurrency: concurrency}); err != nil {
		ln.Close()
		<-accepted
		f.closeConns()
		return nil, err
	}
	select {
	case err = <-accepted:
	case <-time.After(timeout):
		ln.Close()
		err = <-accepted
	}
	if err != nil {
		f.closeConns()
		ch.call(request{Op: opTCPClose}) // already failing: best effort
		return nil, fmt.Errorf("accept: %w", err)
	}
	for i, conn := range f.conns {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			var b [1]byte
			for {
				if _, err := io.ReadFull(conn, b[:]); err != nil {
					return
				}
				now := time.Now()
				f.mu.Lock()
				col := f.cur
				f.mu.Unlock()
				if col != nil {
					col.record(i, now, now)
				}
			}
		}()
	}
	return f, nil
}

// round writes msg to every connection and returns when each has
// answered: t0 (just before the first write) and the answers' times.
func (f *tcpFloor) round(ctx context.Context, msg []byte, timeout time.Duration) (time.Time, *collect, error) {
	col := newCollect(0, len(f.conns))
	f.mu.Lock()
	f.cur = col
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.cur = nil
		f.mu.Unlock()
	}()
	writers := runtime.GOMAXPROCS(0)
	errc := make(chan error, writers)
	t0 := time.Now()
	for w := range writers {
		go func() {
			var first error
			for i := w; i < len(f.conns); i += writers {
				if _, err := f.conns[i].Write(msg); err != nil && first == nil {
					first = err
				}
			}
			errc <- first
		}()
	}
	for range writers {
		if err := <-errc; err != nil {
			return t0, nil, err
		}
	}
	select {
	case <-col.done:
		return t0, col, nil
	case <-ctx.Done():
		return t0, nil, ctx.Err()
	case <-time.After(timeout):
		return t0, nil, fmt.Errorf("%d of %d TCP readers did not answer within %s", col.remaining.Load(), len(f.conns), timeout)
	}
}

func (f *tcpFloor) closeConns() {
	for _, c := range f.conns {
		c.Close()
	}
	f.wg.Wait()
}

func (f *tcpFloor) close(ch *child) error {
	f.ln.Close()
	f.closeConns()
	_, err := ch.call(request{Op: opTCPClose})
	return err
}
