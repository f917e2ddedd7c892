package transparent

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/tunnelstart"
)

// Writer is the http.ResponseWriter a redirected connection is judged
// with, as a CONNECT would be with its own: a tunnel takes the connection
// as it came, with the bytes already read of it (Take); any other answer
// (a denial, a failed dial) is held, and written by Answer only if the
// client speaks plain HTTP. There is no CONNECT to answer.
type Writer struct {
	conn   net.Conn
	header http.Header
	status int
	body   bytes.Buffer
	taken  bool

	read  bool // the start was read (ReadStart)
	held  []byte
	start tunnelstart.Verdict
}

// NewWriter returns the Writer of conn, a redirected connection.
func NewWriter(conn net.Conn) *Writer { return &Writer{conn: conn, header: http.Header{}} }

func (w *Writer) Header() http.Header { return w.header }

func (w *Writer) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *Writer) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// ReadStart reads the client's first bytes, waiting at most wait for the
// first, and judges them against want; they are kept for whoever takes
// the connection. Only the first call reads.
func (w *Writer) ReadStart(want tunnelstart.Want, wait time.Duration) tunnelstart.Verdict {
	if !w.read {
		w.read = true
		w.conn.SetReadDeadline(time.Now().Add(wait))
		w.held, w.start = tunnelstart.Read(w.conn, w.conn, want)
		w.conn.SetReadDeadline(time.Time{})
	}
	return w.start
}

// Take gives the connection to a tunnel, with a reader that starts with
// the bytes already read. They fit its buffer, which takes them all in its
// first read: once it is drained, what is left is the connection's.
func (w *Writer) Take() (net.Conn, *bufio.Reader) {
	w.taken = true
	var r io.Reader = w.conn
	if len(w.held) > 0 {
		r = io.MultiReader(bytes.NewReader(w.held), w.conn)
	}
	return w.conn, bufio.NewReaderSize(r, max(len(w.held), 4096))
}

// Answer writes the answer held, if no tunnel took the connection, with
// Connection: close, when the client speaks plain HTTP: its start is read
// for that (judged against want) if it was not, waiting for it no longer
// than a tunnel's start may take.
func (w *Writer) Answer(want tunnelstart.Want) {
	if w.taken || w.status == 0 || !w.ReadStart(want, tunnelstart.PeekTimeout).HTTP {
		return
	}
	w.header.Set("Content-Length", strconv.Itoa(w.body.Len()))
	w.header.Set("Connection", "close")
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", w.status, http.StatusText(w.status))
	w.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(w.body.Bytes())
	w.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	w.conn.Write(b.Bytes())
}
