package h1

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A handler that panics while its connection is watched (it ran past
// watchAfter) closes that connection only: the server goes on serving,
// and the watch is ended before the connection's reader is reused (-race
// sees any overlap).
func TestHandlerPanicClosesItsConnectionOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			time.Sleep(3 * watchAfter) // long enough to be watched
			panic("handler bug")
		}
		io.WriteString(w, "ok")
	})
	srv := NewServer(Config{Handler: h, Logger: slog.New(slog.DiscardHandler)})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		srv.Shutdown(t.Context(), ln)
		<-done
	}()
	get := func(path string) (*http.Response, error) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", path)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			io.ReadAll(res.Body)
		}
		return res, err
	}
	if res, err := get("/panic"); err == nil {
		t.Fatalf("a panicking handler answered %d; want the connection closed", res.StatusCode)
	}
	for range 3 {
		if res, err := get("/ok"); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("after a panic: %v, %v; want the server still serving", res, err)
		}
	}
}

// The server moves a connection's read deadline only when a read can
// block (setReadDeadline): these check that every read that can block is
// still bounded, and that one that cannot is never cut by a deadline
// left from before.
func TestReadDeadlines(t *testing.T) {
	const short = 150 * time.Millisecond
	// start serves h with the given timeouts; a timeout that is not under
	// test is a minute, so that a missing deadline shows as a hang (the
	// client gives up after 10 s) rather than as the other timeout.
	start := func(t *testing.T, idle, header time.Duration, h http.HandlerFunc) (addr string, called *atomicCount) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		called = new(atomicCount)
		srv := NewServer(Config{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called.add()
			h(w, r)
		}), Logger: slog.New(slog.DiscardHandler), IdleTimeout: idle, HeaderTimeout: header})
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		t.Cleanup(func() {
			srv.Shutdown(context.Background(), ln)
			<-done
		})
		return ln.Addr().String(), called
	}
	dial := func(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	// closedByServer waits for the server to close c (EOF, or a reset).
	closedByServer := func(t *testing.T, br *bufio.Reader) {
		t.Helper()
		if _, err := br.ReadByte(); err == nil || isTimeout(err) {
			t.Fatalf("read: %v; want the server to have closed the connection", err)
		}
	}
	answer := func(t *testing.T, br *bufio.Reader) (int, string) {
		t.Helper()
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	ok := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %d", len(b))
	}

	t.Run("a head sent in parts waits at most the header timeout", func(t *testing.T) {
		addr, called := start(t, time.Minute, short, ok)
		c, br := dial(t, addr)
		io.WriteString(c, "GET / HTTP/1.1\r\nHo")
		closedByServer(t, br)
		if n := called.get(); n != 0 {
			t.Errorf("the handler ran %d times for a head never finished", n)
		}
		// The same head finished within the timeout is served.
		c2, br2 := dial(t, addr)
		io.WriteString(c2, "GET / HTTP/1.1\r\nHo")
		time.Sleep(short / 3)
		io.WriteString(c2, "st: a\r\n\r\n")
		if code, _ := answer(t, br2); code != http.StatusOK {
			t.Errorf("a head finished in time: %d, want 200", code)
		}
	})
	t.Run("an idle connection closes after the idle timeout, also between requests", func(t *testing.T) {
		addr, _ := start(t, short, time.Minute, ok)
		_, br := dial(t, addr)
		closedByServer(t, br)
		c2, br2 := dial(t, addr)
		for range 3 {
			io.WriteString(c2, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if code, _ := answer(t, br2); code != http.StatusOK {
				t.Fatalf("request: %d, want 200", code)
			}
			time.Sleep(short / 3) // idle, but less than the timeout
		}
		closedByServer(t, br2)
	})
	t.Run("a handler's body deadline bounds a trickled body, not a buffered one", func(t *testing.T) {
		addr, _ := start(t, time.Minute, time.Minute, func(w http.ResponseWriter, r *http.Request) {
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(short / 3))
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusRequestTimeout)
				fmt.Fprintf(w, "after %d bytes: %v", len(b), err)
				return
			}
			fmt.Fprintf(w, "read %d", len(b))
		})
		c, br := dial(t, addr)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789")
		if code, body := answer(t, br); code != http.StatusOK || body != "read 10" {
			t.Errorf("a whole body: %d %q, want 200 \"read 10\"", code, body)
		}
		// The same connection, after the deadline the handler set has
		// passed: a buffered body is still read.
		time.Sleep(short / 2)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789")
		if code, body := answer(t, br); code != http.StatusOK || body != "read 10" {
			t.Errorf("a whole body after an old deadline: %d %q, want 200 \"read 10\"", code, body)
		}
		c2, br2 := dial(t, addr)
		io.WriteString(c2, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n01234")
		if code, body := answer(t, br2); code != http.StatusRequestTimeout || !strings.Contains(body, "after 5 bytes") {
			t.Errorf("a trickled body: %d %q, want 408 after 5 bytes", code, body)
		}
	})
	t.Run("a body that arrives slowly is bounded by its reader, not the header deadline", func(t *testing.T) {
		addr, _ := start(t, time.Minute, short, ok)
		for _, head := range []string{
			"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n",
			"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
		} {
			c, br := dial(t, addr)
			chunked := strings.Contains(head, "chunked")
			part := func(s string) string {
				if chunked {
					return fmt.Sprintf("%x\r\n%s\r\n", len(s), s)
				}
				return s
			}
			io.WriteString(c, head[:20])
			time.Sleep(short / 3)
			io.WriteString(c, head[20:]+part("01234"))
			time.Sleep(2 * short)
			rest := part("56789")
			if chunked {
				rest += "0\r\n\r\n"
			}
			io.WriteString(c, rest)
			if code, body := answer(t, br); code != http.StatusOK || body != "read 10" {
				t.Errorf("%q: %d %q, want 200 \"read 10\"", head, code, body)
			}
		}
	})
	t.Run("a pipelined request after a slow handler is served", func(t *testing.T) {
		addr, called := start(t, time.Minute, short, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				time.Sleep(3 * short) // past the header deadline the first head set
			}
			ok(w, r)
		})
		c, br := dial(t, addr)
		io.WriteString(c, "POST /slow HTTP/1.1\r\nHost: a\r\n")
		time.Sleep(short / 3)
		io.WriteString(c, "Content-Length: 2\r\n\r\nab"+"POST /next HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc")
		for _, want := range []string{"read 2", "read 3"} {
			if code, body := answer(t, br); code != http.StatusOK || body != want {
				t.Fatalf("pipelined: %d %q, want 200 %q", code, body, want)
			}
		}
		if n := called.get(); n != 2 {
			t.Errorf("the handler ran %d times, want 2", n)
		}
	})
}

type atomicCount struct{ n atomic.Int64 }

func (a *atomicCount) add()       { a.n.Add(1) }
func (a *atomicCount) get() int64 { return a.n.Load() }

// whenEnded is context.AfterFunc for the upstream exchange of a request
// the server read, without allocating.
func TestWhenEnded(t *testing.T) {
	newConn := func() *serverConn {
		c := &serverConn{}
		c.ctx, c.cancel = context.WithCancel(context.WithValue(context.Background(), connKey{}, c))
		return c
	}
	var runs atomic.Int64
	f := func() { runs.Add(1) }

	c := newConn()
	ctx := context.WithValue(c.ctx, valueKey{}, "client") // values added, no cancellation of its own
	if n := testing.AllocsPerRun(100, func() { whenEnded(ctx, &f).stopped() }); n != 0 {
		t.Errorf("arming and stopping allocates %v times", n)
	}
	if runs.Load() != 0 {
		t.Fatal("f ran without the request ending")
	}
	h := whenEnded(ctx, &f)
	c.end()
	if runs.Load() != 1 || h.stopped() {
		t.Errorf("the connection ended: f ran %d times, stopped %v; want once, false", runs.Load(), h.stopped())
	}
	c.end()
	if runs.Load() != 1 {
		t.Errorf("f ran %d times after a second end", runs.Load())
	}

	// Armed on a context that has ended: f runs at once.
	runs.Store(0)
	if h := whenEnded(ctx, &f); runs.Load() != 1 || h.stopped() {
		t.Errorf("armed after the end: f ran %d times; want once", runs.Load())
	}

	// A context with a cancellation of its own, and a second hook while one
	// is held, go to context.AfterFunc: each f runs when its context ends.
	c = newConn()
	runs.Store(0)
	first := whenEnded(c.ctx, &f)
	g := func() { runs.Add(10) }
	second := whenEnded(c.ctx, &g)
	sub, cancel := context.WithCancel(c.ctx)
	h = whenEnded(sub, &f)
	cancel()
	waitUntilTrue(t, func() bool { return runs.Load() == 1 })
	if h.stopped() {
		t.Error("stopped after its context ended")
	}
	c.end()
	waitUntilTrue(t, func() bool { return runs.Load() == 12 })
	if first.stopped() || second.stopped() {
		t.Error("stopped after the connection ended")
	}
}

// valueKey is a context value a request's context may carry beside its
// connection (Config.ConnContext).
type valueKey struct{}

func waitUntilTrue(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// A Connection header naming many fields, over a head holding many
// fields: each is removed, the end-to-end one kept, and each field is
// looked up once (a list compared with every field was quadratic in what
// an upstream sends).
func TestRemoveHopByHopManyNames(t *testing.T) {
	const n = 20000
	h := http.Header{"X-Kept": {"1"}}
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("X-F%d", i)
		h[names[i]] = []string{"v"}
	}
	h["Connection"] = []string{"close, " + strings.Join(names, ", ")}
	RemoveHopByHop(h)
	if len(h) != 1 || h.Get("X-Kept") != "1" {
		t.Fatalf("%d fields left, want only X-Kept", len(h))
	}
}
