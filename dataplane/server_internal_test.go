package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	srv := newHTTPServer(h, func(net.Conn) *client { return &client{} }, slog.New(slog.DiscardHandler))
	done := make(chan error, 1)
	go func() { done <- srv.serve(ln) }()
	defer func() {
		srv.shutdown(t.Context(), ln)
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

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                   false,
		"":                                   false,
		"text/event-stream":                  true,
		"Text/Event-Stream; charset=utf-8":   true,
		" text/event-stream ":                true,
		"application/json; charset=utf-8":    false,
		"text/event-stream; charset=\"utf-8": false, // unparseable
	} {
		if got := isEventStream(ct); got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}
