package transport

import (
	"context"
	"io"
	"net/http"
)

// Interrupter ends a stream's pending Receive (and Send); result is what
// the stream's handler will return.
type Interrupter interface{ Interrupt(result error) }

// InterruptibleMux gives the handler of Procedure (the policy stream) a
// way to end its own Receive: Connect reads the request body, and a
// Receive blocked on a peer that sends nothing (a dead or misbehaving
// proxy) would otherwise hold the stream until the connection dies.
// Closing the body from another goroutine ends that read. Only that
// procedure pays for it. (On grpc-go, GRPCInterrupter does the same.)
type InterruptibleMux struct {
	*http.ServeMux
	Procedure string
}

// interruptKey holds a stream's interrupter.
type interruptKey struct{}

// Handle registers h, giving Procedure's requests a body interrupter.
func (m InterruptibleMux) Handle(pattern string, h http.Handler) {
	if pattern != m.Procedure {
		m.ServeMux.Handle(pattern, h)
		return
	}
	m.ServeMux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(WithInterrupter(r.Context(), bodyInterrupter{r.Body})))
	}))
}

// WithInterrupter returns ctx carrying i for StreamInterrupter.
func WithInterrupter(ctx context.Context, i Interrupter) context.Context {
	return context.WithValue(ctx, interruptKey{}, i)
}

// bodyInterrupter closes the request body.
type bodyInterrupter struct{ body io.Closer }

func (b bodyInterrupter) Interrupt(error) { b.body.Close() }

type noInterrupter struct{}

func (noInterrupter) Interrupt(error) {}

// StreamInterrupter returns what ends the stream's pending Receive (a
// no-op outside InterruptibleMux and the grpc-go server).
func StreamInterrupter(ctx context.Context) Interrupter {
	i, ok := ctx.Value(interruptKey{}).(Interrupter)
	if !ok {
		return noInterrupter{}
	}
	return i
}

// OffStack runs f on a short-lived goroutine and waits for it. A policy
// stream's goroutine lives for hours; calls into the store (the SQLite
// driver's especially) grow a goroutine's stack to 16 KiB, which an idle
// stream would then keep. Run there, they leave it at its small size.
func OffStack[T any](f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() {
		v, err := f()
		c <- result{v, err}
	}()
	r := <-c
	return r.v, r.err
}
