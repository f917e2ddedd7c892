package h1

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the http.ResponseWriter of one request.
type response struct {
	c             *serverConn
	req           *http.Request
	header        http.Header
	status        int
	wroteHeader   bool
	committed     bool // the head is written
	contentLength int64
	written       int64
	chunked       bool
	noBody        bool
	closeAfter    bool
	err           error
	pending       []byte
}

func (w *response) reset(c *serverConn, r *http.Request) {
	h, pending := w.header, w.pending[:0]
	if h == nil {
		h = make(http.Header, 8)
	} else {
		clear(h)
	}
	*w = response{c: c, req: r, header: h, contentLength: -1, pending: pending}
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader || w.c.hijacked {
		return
	}
	if code < 100 || code > 999 {
		code = http.StatusInternalServerError
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		return // informational answers are not relayed
	}
	w.wroteHeader, w.status = true, code
	w.c.uncount() // what follows is the body's relay
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	if v := w.header["Content-Length"]; len(v) > 0 {
		if n, ok := parseContentLength(v[0]); ok {
			w.contentLength = n
		} else {
			delete(w.header, "Content-Length")
		}
	}
}

func (w *response) Write(p []byte) (int, error) {
	if w.c.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		if w.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if w.contentLength < 0 && len(w.pending)+len(p) <= pendingBody {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.commit(false)
	}
	return len(p), w.writeBody(p)
}

// writeBody writes p as the body, in a chunk when chunked.
func (w *response) writeBody(p []byte) error {
	if len(p) == 0 || w.err != nil {
		return w.err
	}
	bw := w.c.bw
	if w.chunked {
		writeInt(bw, int64(len(p)), 16)
		bw.WriteString("\r\n")
		bw.Write(p)
		_, w.err = bw.WriteString("\r\n")
	} else {
		_, w.err = bw.Write(p)
	}
	if w.err != nil {
		w.closeAfter = true
	}
	return w.err
}

// commit writes the status line and header. final says the handler has
// returned: a body held whole goes with its length.
func (w *response) commit(final bool) {
	w.committed = true
	r, h := w.req, w.header
	_, trailers := h["Trailer"]
	switch {
	case w.noBody:
	case w.contentLength >= 0 && !trailers:
	case final && !trailers:
		w.contentLength = int64(len(w.pending))
		h["Content-Length"] = []string{strconv.Itoa(len(w.pending))}
	case r.ProtoAtLeast(1, 1):
		delete(h, "Content-Length")
		w.contentLength = -1
		w.chunked = true
		h["Transfer-Encoding"] = []string{"chunked"}
	default:
		// An HTTP/1.0 client reads to the end of the connection.
		delete(h, "Content-Length")
		w.contentLength = -1
		w.closeAfter = true
	}
	if !w.c.discardBody(r) {
		w.closeAfter = true
	}
	if r.Close || httpguts.HeaderValuesContainsToken(h["Connection"], "close") || w.c.srv.draining.Load() {
		w.closeAfter = true
	}
	if w.closeAfter {
		h["Connection"] = []string{"close"}
	} else if !r.ProtoAtLeast(1, 1) {
		h["Connection"] = []string{"keep-alive"}
	}
	_, dated := h["Date"]

	bw := w.c.bw
	bw.WriteString("HTTP/1.1 ")
	writeInt(bw, int64(w.status), 10)
	bw.WriteByte(' ')
	if text := http.StatusText(w.status); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code " + strconv.Itoa(w.status))
	}
	bw.WriteString("\r\n")
	writeFields(bw, h, nil)
	if !dated {
		// Written, not set: a header map entry would cost a slice.
		writeField(bw, "Date", httpDate())
	}
	_, w.err = bw.WriteString("\r\n")
	if w.err != nil {
		w.closeAfter = true
	}
	if len(w.pending) > 0 {
		p := w.pending
		w.pending = w.pending[:0]
		w.writeBody(p)
	}
}

// writeInt writes n in base into bw's own buffer, without allocating
// (a local array would escape through bufio.Writer.Write).
func writeInt(bw *bufio.Writer, n int64, base int) {
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), n, base))
}

// writeFields writes the fields of h whose names are tokens, except those
// skip names (nil: none).
func writeFields(bw *bufio.Writer, h http.Header, skip func(name string) bool) {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) || skip != nil && skip(k) {
			continue
		}
		for _, v := range vv {
			writeField(bw, k, v)
		}
	}
}

// writeField writes one field line, the value with any CR or LF as a
// space so that no value can end the header early.
func writeField(bw *bufio.Writer, name, value string) {
	bw.WriteString(name)
	bw.WriteString(": ")
	if strings.ContainsAny(value, "\r\n") {
		value = strings.NewReplacer("\r", " ", "\n", " ").Replace(value)
	}
	bw.WriteString(value)
	bw.WriteString("\r\n")
}

// Flush sends the head and everything written so far.
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush, saying why it failed (http.ResponseController).
func (w *response) FlushError() error {
	if w.c.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false)
	}
	if w.err != nil {
		return w.err
	}
	if w.err = w.c.bw.Flush(); w.err != nil {
		w.closeAfter = true
	}
	return w.err
}

// finish completes the response once the handler has returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true)
	}
	bw := w.c.bw
	if w.chunked && w.err == nil {
		bw.WriteString("0\r\n")
		for _, names := range w.header["Trailer"] {
			for name := range strings.SplitSeq(names, ",") {
				k := http.CanonicalHeaderKey(strings.TrimSpace(name))
				if !httpguts.ValidHeaderFieldName(k) {
					continue
				}
				for _, v := range w.header[k] {
					writeField(bw, k, v)
				}
			}
		}
		_, w.err = bw.WriteString("\r\n")
	}
	if !w.noBody && w.contentLength >= 0 && w.written < w.contentLength {
		w.closeAfter = true // the client waits for bytes that will not come
	}
	if w.err == nil {
		w.err = bw.Flush()
	}
	if w.err != nil {
		w.closeAfter = true
	}
}

// SetReadDeadline and SetWriteDeadline are for http.ResponseController.
// A read deadline is for reading the request: once its whole body is
// buffered no read reaches the connection, and the deadline is left as
// it is (the next request's reading sets its own).
func (w *response) SetReadDeadline(t time.Time) error {
	if !w.c.bodyBuffered {
		w.c.setReadDeadline(t)
	}
	return nil
}

func (w *response) SetWriteDeadline(t time.Time) error { return w.c.conn.SetWriteDeadline(t) }

// Hijack hands the connection to the handler (CONNECT tunnels), with what
// the server had read of it.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c := w.c
	if c.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.committed {
		return nil, nil, errors.New("hijack after the response began")
	}
	c.unwatch()
	c.uncount()
	c.mu.Lock()
	c.hijacked = true
	c.mu.Unlock()
	c.conn.SetDeadline(time.Time{})
	c.srv.untrack(c)
	c.srv.served.Done() // no longer the server's to wait for
	return c.conn, bufio.NewReadWriter(c.br, c.bw), nil
}

// httpDate is the Date header value, formatted once a second.
func httpDate() string {
	now := time.Now().Unix()
	if d := cachedDate.Load(); d != nil && d.sec == now {
		return d.text
	}
	d := &dateText{sec: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	cachedDate.Store(d)
	return d.text
}

type dateText struct {
	sec  int64
	text string
}

var cachedDate atomic.Pointer[dateText]
