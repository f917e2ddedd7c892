package h1

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"
)

// Bounds on reading a body whole (ReadBody).
const (
	BodyReadTimeout   = 30 * time.Second
	InitialBodyBuffer = 16 << 10
)

// ErrBodyRead is ReadBody's error for a body that could not be read.
var ErrBodyRead = errors.New("cannot read the request body")

// ReadBody reads r's body whole, to one byte past limit at most (a longer
// body is returned cut there: the caller refuses it), counting the bytes
// actually read (chunked bodies included). A client that announces a body
// and trickles it must not hold memory or a goroutine for long: the read
// is bounded by BodyReadTimeout, and the buffer grows only as bytes
// arrive (never from the announced length alone).
func ReadBody(w http.ResponseWriter, r *http.Request, limit int) ([]byte, error) {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(BodyReadTimeout))
	defer rc.SetReadDeadline(time.Time{})
	raw, err := ReadUpTo(r.Body, r.ContentLength, limit)
	if err != nil {
		return nil, ErrBodyRead
	}
	return raw, nil
}

// ReadUpTo reads r to its end, or to one byte past limit, into one
// buffer: sized first from the announced length (at most
// InitialBodyBuffer) and one byte more, the room to see the end, and
// doubled only when bytes arrive to fill it.
func ReadUpTo(r io.Reader, announced int64, limit int) ([]byte, error) {
	size := bytes.MinRead // unannounced: a chunked body
	if announced >= 0 {
		size = int(min(announced, InitialBodyBuffer)) + 1
	}
	buf := make([]byte, 0, size)
	for len(buf) <= limit {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		room := buf[len(buf):min(cap(buf), limit+1)]
		n, err := r.Read(room)
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
