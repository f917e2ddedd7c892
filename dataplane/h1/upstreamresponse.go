package h1

import (
	"bufio"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The proxy reads its upstreams' responses itself, as it reads its
// clients' requests (request.go): a status line, header fields and a
// body framed as net/http.ReadResponse frames it, with about half the
// allocations ReadResponse makes (nine, for a short response). Framing
// is what keeps a pooled connection in step with its server: where the
// reader stops is where it starts the next response, which may be
// another client's.
//
// Whatever this reader accepts, ReadResponse accepts the same way
// (FuzzResponseReader holds it to that). It is stricter than Go in these,
// each an error that closes the connection (the client gets a 502):
//
//   - a status code other than three digits from 100 up (Go takes "+12"
//     and "099");
//   - an HTTP version other than 1.x (Go takes 0.9 and 2.0 here);
//   - a control byte (other than tab) in the status line;
//   - a header line continuing the one before it (obs-fold; Go joins it);
//   - a space before a field name's colon (Go keeps such a name as sent);
//   - a CR anywhere in the head but just before a line's LF (Go trims
//     CRs ending a header line, and keeps them in the status text);
//   - a trailer line ending in a bare LF, or a folded one (Go takes a
//     bare LF in a trailer only when a CRLF CRLF comes up in the buffer
//     after it).
//
// And it keeps one field Go drops: an HTTP/1.1 Connection field saying
// close. The fields it names are hop-by-hop too, and the proxy's forward, which
// removes the hop-by-hop fields before answering its client, must see
// them to remove them.

const (
	// maxResponseTrailerBytes bounds a chunked body's trailer section, as
	// Go bounds it: to what its 4 KiB reader buffers.
	maxResponseTrailerBytes = 4 << 10
)

var errResponseHeadTooLarge = errors.New("response head too large")

// upstreamResponse is a response and its body in one allocation.
type upstreamResponse struct {
	res  http.Response
	body upstreamBody
	te   [1]string // res.TransferEncoding's backing array
	vals [8]string // res.Header's values, when there are no more
}

// readResponse reads a response to a request with method from br, its
// head up to maxResponseHeaderBytes, and frames its body to read from br.
// head is a buffer kept between calls; nothing returned refers to it.
// The header fields are read into header, emptied first (nil: a new
// map), which becomes the response's Header.
func readResponse(br *bufio.Reader, head *[]byte, method string, header http.Header) (*upstreamResponse, error) {
	s, lines, err := readResponseHead(br, head)
	if err != nil {
		return nil, err
	}
	// One string for the whole head: the protocol, the status and every
	// header value are slices of it.
	statusLine, fields, _ := strings.Cut(s, "\n")
	statusLine = strings.TrimSuffix(statusLine, "\r")
	proto, status, ok := strings.Cut(statusLine, " ")
	if !ok {
		return nil, errors.New("malformed HTTP response")
	}
	if !httpguts.ValidHeaderFieldValue(statusLine) {
		return nil, errors.New("malformed HTTP status line") // stricter than Go
	}
	status = strings.TrimLeft(status, " ")
	codeText, _, _ := strings.Cut(status, " ")
	code, ok := statusCode(codeText)
	if !ok {
		return nil, errors.New("malformed HTTP status code")
	}
	major, minor, ok := http.ParseHTTPVersion(proto)
	if !ok {
		return nil, errors.New("malformed HTTP version")
	}
	if major != 1 {
		return nil, errors.New("unsupported HTTP version") // stricter than Go
	}

	r := &upstreamResponse{}
	res := &r.res
	res.Status, res.StatusCode = status, code
	res.Proto, res.ProtoMajor, res.ProtoMinor = proto, major, minor
	if header == nil {
		header = make(http.Header, lines)
	} else {
		clear(header)
	}
	res.Header = header
	values := r.vals[:0]
	if lines > len(r.vals) {
		values = make([]string, 0, lines)
	}
	if err := readResponseFields(res.Header, fields, values); err != nil {
		return nil, err
	}
	if hp, ok := res.Header["Pragma"]; ok && len(hp) > 0 && hp[0] == "no-cache" {
		if _, ok := res.Header["Cache-Control"]; !ok {
			res.Header["Cache-Control"] = []string{"no-cache"} // as Go does
		}
	}
	if err := frameResponse(r, method); err != nil {
		return nil, err
	}
	r.body.br = br
	return r, nil
}

// statusCode parses a status code: three digits, 100 to 999.
func statusCode(s string) (int, bool) {
	if len(s) != 3 || s[0] < '1' || s[0] > '9' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' {
		return 0, false
	}
	return int(s[0]-'0')*100 + int(s[1]-'0')*10 + int(s[2]-'0'), true
}

// readResponseHead reads a status line and header fields up to the blank
// line into *buf, returning them as one string and the number of field
// lines. A line may end in CRLF or a bare LF, as Go reads it.
func readResponseHead(br *bufio.Reader, buf *[]byte) (string, int, error) {
	b := (*buf)[:0]
	lines, start := 0, 0 // field lines so far; where the current line starts
	for {
		line, err := br.ReadSlice('\n')
		if len(b)+len(line) > maxResponseHeaderBytes {
			return "", 0, errResponseHeadTooLarge
		}
		b = append(b, line...)
		if err == bufio.ErrBufferFull {
			continue // a line longer than the reader's buffer
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			*buf = b[:0]
			return "", 0, err
		}
		full := b[start:]
		if len(full) == 1 || len(full) == 2 && full[0] == '\r' {
			if start == 0 {
				return "", 0, errors.New("malformed HTTP response") // no status line
			}
			break
		}
		if start > 0 {
			lines++
		}
		start = len(b)
	}
	s := string(b)
	if cap(b) > 16<<10 {
		b = nil // a large head's buffer is not kept for the connection's life
	}
	*buf = b[:0]
	return s, lines, nil
}

// readResponseFields parses the header field lines of fields (the head
// after its status line) into h, its values cut from values' backing
// array (cap(values) is the number of lines).
func readResponseFields(h http.Header, fields string, values []string) error {
	for line := range headLines(fields) {
		if line[0] == ' ' || line[0] == '\t' {
			return errors.New("folded response header line (obs-fold)") // stricter than Go
		}
		name, value, err := parseField(line)
		if err != nil {
			return err
		}
		addField(h, &values, name, value)
	}
	return nil
}

// frameResponse decides the response's body from its status, the request
// method, Transfer-Encoding and Content-Length, and sets its
// ContentLength, TransferEncoding, Close and Trailer, as Go's
// readTransfer does (the header fields it removes, this removes).
func frameResponse(r *upstreamResponse, method string) error {
	res, h := &r.res, r.res.Header
	http11 := res.ProtoMinor >= 1 // ProtoMajor is 1

	// Connection: HTTP/1.0 closes unless kept alive; HTTP/1.1 on close
	// (Go then drops the field; it is kept here, see above).
	conn := h["Connection"]
	hasClose := httpguts.HeaderValuesContainsToken(conn, "close")
	if http11 {
		res.Close = hasClose
	} else {
		res.Close = hasClose || !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	}

	// Transfer-Encoding: exactly "chunked" on HTTP/1.1; ignored on
	// HTTP/1.0, as Go ignores it.
	chunked := false
	if te, ok := h["Transfer-Encoding"]; ok {
		delete(h, "Transfer-Encoding")
		if http11 {
			if len(te) != 1 || !EqualFoldASCII(te[0], "chunked") {
				return errors.New("unsupported transfer encoding")
			}
			chunked = true
		}
	}

	// Content-Length: repeats must agree; the value must be valid even
	// where the status or method says there is no body.
	cls := h["Content-Length"]
	declared := int64(-1)
	if len(cls) > 0 {
		for _, v := range cls[1:] {
			if v != cls[0] { // values are trimmed already
				return errors.New("multiple Content-Length headers")
			}
		}
		if len(cls) > 1 {
			h["Content-Length"] = cls[:1]
		}
		n, ok := parseContentLength(cls[0])
		if !ok {
			return errors.New("invalid Content-Length")
		}
		declared = n
	}

	head := method == http.MethodHead
	bodyAllowed := bodyAllowedForStatus(res.StatusCode)
	var length int64 // the body's length on the wire; -1 for chunked or to EOF
	switch {
	case head || !bodyAllowed:
		length = 0
	case chunked:
		delete(h, "Content-Length")
		length = -1
	default:
		length = declared
	}
	res.ContentLength = length
	if head {
		res.ContentLength = declared
	}
	if chunked {
		r.te[0] = "chunked"
		res.TransferEncoding = r.te[:]
		if err := announcedTrailer(res); err != nil {
			return err
		}
	}

	b := &r.body
	b.trailer = &res.Trailer
	switch {
	case chunked && (head || !bodyAllowed), length == 0:
		b.kind = noBody
	case chunked:
		b.kind = chunkedBody
	case length > 0:
		b.kind, b.n = lengthBody, length
	default:
		// Neither length nor chunks: the body ends with the connection.
		b.kind = eofBody
		res.Close = true
	}
	return nil
}

func bodyAllowedForStatus(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

// announcedTrailer moves a chunked response's Trailer field into
// res.Trailer: the names it announces, values to come after the body.
func announcedTrailer(res *http.Response) error {
	vv, ok := res.Header["Trailer"]
	if !ok {
		return nil
	}
	delete(res.Header, "Trailer")
	var t http.Header
	for _, v := range vv {
		for key := range strings.SplitSeq(v, ",") {
			key = textproto.TrimString(key)
			if key == "" {
				continue
			}
			switch key = canonicalName(key); key {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return errors.New("bad trailer key " + key)
			}
			if t == nil {
				t = make(http.Header)
			}
			t[key] = nil
		}
	}
	res.Trailer = t
	return nil
}

// EqualFoldASCII is strings.EqualFold for ASCII letters only, as HTTP
// compares tokens: strings.EqualFold would take "chun\u212aed" (a Kelvin
// sign) for "chunked".
func EqualFoldASCII(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

type bodyKind uint8

const (
	noBody      bodyKind = iota // none on the wire
	lengthBody                  // Content-Length bytes
	chunkedBody                 // chunks, then a trailer section
	eofBody                     // up to the connection's end
)

// responseBody reads a response's body from br as its head framed it.
type responseBody struct {
	br      *bufio.Reader
	kind    bodyKind
	n       int64        // bytes left of a Content-Length body
	chunks  io.Reader    // a chunked body's reader, made on first read
	trailer *http.Header // the response's Trailer, filled in at the end
	eof     bool
	err     error // what ended the body early, returned from then on
}

func (b *responseBody) Read(p []byte) (n int, err error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.eof {
		return 0, io.EOF
	}
	switch b.kind {
	case noBody:
		err = io.EOF
	case lengthBody:
		if int64(len(p)) > b.n {
			p = p[:b.n]
		}
		n, err = b.br.Read(p)
		b.n -= int64(n)
		switch {
		case b.n == 0:
			err = io.EOF // the last byte: say so now, not on the next read
		case err == io.EOF:
			err = io.ErrUnexpectedEOF
		}
	case chunkedBody:
		if b.chunks == nil {
			b.chunks = httputil.NewChunkedReader(b.br)
		}
		n, err = b.chunks.Read(p)
		if err == io.EOF {
			if terr := b.readTrailer(); terr != nil {
				err = terr
			}
		}
	case eofBody:
		n, err = b.br.Read(p)
	}
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.err = err
	}
	return n, err
}

// readTrailer reads the trailer section after a chunked body's last chunk
// into *b.trailer, as Go merges it: the fields sent replace the announced
// ones, and are kept when none were announced.
func (b *responseBody) readTrailer() error {
	var h http.Header
	total := 0
	for {
		line, err := b.br.ReadSlice('\n')
		total += len(line)
		if total > maxResponseTrailerBytes || err == bufio.ErrBufferFull {
			return errors.New("response trailer too large")
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return errors.New("response trailer line ending in a bare LF") // stricter than Go
		}
		if len(line) == 2 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return errors.New("folded response trailer line (obs-fold)") // stricter than Go
		}
		name, value, err := parseField(string(line[:len(line)-2]))
		if err != nil {
			return err
		}
		if h == nil {
			h = make(http.Header)
		}
		h[name] = append(h[name], value)
	}
	if *b.trailer == nil {
		*b.trailer = h
	} else {
		maps.Copy(*b.trailer, h)
	}
	return nil
}
