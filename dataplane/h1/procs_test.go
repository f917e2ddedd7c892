package h1

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// recordedProcs is a Procs whose GOMAXPROCS changes are recorded,
// not made (the test process keeps its own).
type recordedProcs struct {
	*Procs
	mu      sync.Mutex
	changes []bool
	changed chan bool
}

func newRecordedProcs(quiet time.Duration) *recordedProcs {
	r := &recordedProcs{Procs: NewProcs(), changed: make(chan bool, 16)}
	r.quiet = quiet
	r.setWide = func(wide bool) {
		r.mu.Lock()
		r.changes = append(r.changes, wide)
		r.mu.Unlock()
		r.changed <- wide
	}
	return r
}

// next waits for the next GOMAXPROCS change and checks it.
func (r *recordedProcs) next(t *testing.T, wide bool) {
	t.Helper()
	select {
	case got := <-r.changed:
		if got != wide {
			t.Fatalf("GOMAXPROCS changed to wide=%v, want wide=%v", got, wide)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("GOMAXPROCS did not change to wide=%v", wide)
	}
}

// none checks that GOMAXPROCS does not change within d.
func (r *recordedProcs) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-r.changed:
		t.Fatalf("GOMAXPROCS changed to wide=%v; want no change", got)
	case <-time.After(d):
	}
}

func TestProcScalerWidensOnOverlapAndNarrowsWhenQuiet(t *testing.T) {
	r := newRecordedProcs(200 * time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	r.next(t, false) // starts on one P

	// One request at a time, however many: one P.
	for range 100 {
		r.begin()
		r.end()
	}
	r.none(t, 300*time.Millisecond)

	// A second request while the first is served: every P.
	r.begin()
	r.begin()
	r.next(t, true)
	// Requests that keep overlapping keep it wide past the quiet period.
	for range 6 {
		time.Sleep(r.quiet / 4)
		r.end()
		r.begin()
	}
	r.none(t, r.quiet/2)
	r.end()
	r.end()
	// No overlap for the quiet period: one P again.
	r.next(t, false)

	// And wide again at the next overlap.
	r.begin()
	r.begin()
	r.next(t, true)
	r.end()
	r.end()

	cancel()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	// On its way out the default is restored.
	if want := []bool{false, true, false, true, true}; !slices.Equal(r.changes, want) {
		t.Fatalf("GOMAXPROCS changes %v, want %v", r.changes, want)
	}
}

// A request overlapping while the scaler narrows is not lost: the proxy
// widens again rather than serving two requests on one P.
func TestProcScalerOverlapWhileNarrowing(t *testing.T) {
	r := newRecordedProcs(100 * time.Millisecond)
	release := make(chan struct{})
	first := true
	r.setWide = func(wide bool) {
		if !wide && !first {
			// Two requests begin while the scaler narrows.
			r.begin()
			r.begin()
			<-release
		}
		first = false
		r.changed <- wide
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go r.Run(ctx)
	r.next(t, false)
	r.begin()
	r.begin()
	r.next(t, true)
	r.end()
	r.end()
	close(release)
	r.next(t, false)
	r.next(t, true) // the overlap during narrowing widens it again
}

func TestNilProcScaler(t *testing.T) {
	var s *Procs
	s.begin() // a proxy without AdaptProcs counts nothing
	s.end()
}

// The server counts a request from its head until its response head is
// written: a response that streams on does not count, so a client's
// open event stream leaves the proxy on one P.
func TestServerCountsRequestsUntilResponseHead(t *testing.T) {
	procs := NewProcs()
	headWritten := make(chan struct{})
	finish := make(chan struct{})
	counted := make(chan int32, 2)
	addr := serveCounted(t, procs, func(w http.ResponseWriter, r *http.Request) {
		counted <- procs.active.Load()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(headWritten)
		<-finish
		io.WriteString(w, "event: end\n\n")
	})

	res := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/events")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		res <- err
	}()
	if n := <-counted; n != 1 {
		t.Fatalf("while the handler runs, %d requests are counted; want 1", n)
	}
	<-headWritten
	if n := procs.active.Load(); n != 0 {
		t.Fatalf("after the response head, %d requests are counted; want 0", n)
	}
	close(finish)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if n := procs.active.Load(); n != 0 {
		t.Fatalf("after the response, %d requests are counted; want 0", n)
	}
}

// A handler that panics before its response head (http.ErrAbortHandler,
// as an aborted exchange does) leaves no request counted: a leaked count
// would keep the proxy wide for good.
func TestServerUncountsAbortedRequests(t *testing.T) {
	procs := NewProcs()
	addr := serveCounted(t, procs, func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	})
	for range 3 {
		if resp, err := http.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
			t.Fatal("an aborted request was answered")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for procs.active.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d aborted requests are still counted", procs.active.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serveCounted serves h on a loopback port until the test ends, its
// requests counted in procs; it returns the address.
func serveCounted(t *testing.T, procs *Procs, h http.HandlerFunc) string {
	t.Helper()
	srv := NewServer(Config{Handler: h, Procs: procs, Logger: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background(), ln)
		<-served
	})
	return ln.Addr().String()
}
