// Package wsproxy carries a WebSocket (RFC 6455) through the proxy: it
// checks a client's opening handshake, says which endpoints carry one,
// and forwards the handshake and then the messages, the client's read
// and rewritten by dataplane/wsframe, the server's relayed as they come.
//
// Only a rest endpoint with websocket_credential_rewrite carries a
// WebSocket: there the proxy reads every message the client sends, so a
// provider's placeholder is replaced by its credential in a text message
// (the endpoint's credential_binding) and any other placeholder closes
// the connection with 1008 before that message goes anywhere. Elsewhere
// an upgrade is refused: what follows a 101 would pass uninspected.
//
// Extensions are not negotiated: the proxy removes
// Sec-WebSocket-Extensions from the handshake it forwards (a
// permessage-deflate message could not be read), and an upstream that
// answers with one anyway is refused.
package wsproxy

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/wsframe"
	"github.com/portcullis-dev/portcullis/policy"
)

// Protocol is the upgrade token of a WebSocket.
const Protocol = "websocket"

// closeWait bounds the wait, after the client's close frame went
// upstream, for the server's to come back before both ends are closed.
const closeWait = 5 * time.Second

// lingerFor bounds how long, after the proxy closed a WebSocket itself,
// what its client still sends is read and dropped.
const lingerFor = 2 * time.Second

// Requested reports whether r asks for a protocol upgrade.
func Requested(r *http.Request) bool {
	_, ok := r.Header["Upgrade"]
	return ok
}

// CheckHandshake says why r is not a WebSocket opening handshake the
// proxy carries (RFC 6455 §4.1); "" when it is one, or asks no upgrade.
// Nothing the client sent is quoted.
func CheckHandshake(r *http.Request) string {
	up, ok := r.Header["Upgrade"]
	if !ok {
		return ""
	}
	h := r.Header
	switch {
	case len(up) != 1 || !strings.EqualFold(strings.TrimSpace(up[0]), Protocol):
		return "the proxy carries only upgrades to websocket"
	case r.Method != http.MethodGet:
		return "a WebSocket handshake must be a GET"
	case !r.ProtoAtLeast(1, 1):
		return "a WebSocket handshake must be HTTP/1.1"
	case !httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade"):
		return "a WebSocket handshake's Connection must name Upgrade"
	case len(h["Sec-Websocket-Version"]) != 1 || h.Get("Sec-Websocket-Version") != "13":
		return "a WebSocket handshake must have one Sec-WebSocket-Version, 13"
	case len(h["Sec-Websocket-Key"]) != 1 || !validKey(h.Get("Sec-Websocket-Key")):
		return "a WebSocket handshake must have one Sec-WebSocket-Key, 16 bytes in base64"
	case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
		return "a WebSocket handshake must not carry a body"
	}
	return ""
}

func validKey(k string) bool {
	b, err := base64.StdEncoding.DecodeString(k)
	return err == nil && len(b) == 16
}

// Refused says why r, when it is a WebSocket handshake that d (a
// decision of pol) allowed, is not carried (NotCarried); "" when it is,
// or when r asks no upgrade: a request's cost is one map lookup.
func Refused(r *http.Request, pol *policy.Policy, d policy.Decision) string {
	if !Requested(r) {
		return ""
	}
	var ep *policy.Endpoint
	if np, ok := pol.NetworkPolicies[d.Entry]; ok && d.Endpoint >= 0 && d.Endpoint < len(np.Endpoints) {
		ep = np.Endpoints[d.Endpoint]
	}
	return NotCarried(ep, d.Review > 0)
}

// NotCarried says why ep, the endpoint that allowed a WebSocket
// handshake (nil: none), does not carry the WebSocket; "" when it does.
// held: the handshake was to be held for review, which it cannot wait
// for.
func NotCarried(ep *policy.Endpoint, held bool) string {
	switch {
	case ep == nil || ep.Protocol != policy.ProtocolREST || !ep.WebsocketCredentialRewrite:
		return "a WebSocket is carried only by a rest endpoint with websocket_credential_rewrite (its messages are read); elsewhere they would pass uninspected"
	case held:
		return "a WebSocket handshake cannot be held for review"
	}
	return ""
}

// StillCarried says why an open WebSocket, opened with provider bound
// ("": none), is no longer carried by ep, the endpoint that allows it now
// (held: now held for review); "" when it still is. Its messages are
// rewritten as its handshake's endpoint said: a new binding needs a new
// WebSocket.
func StillCarried(ep *policy.Endpoint, held bool, bound string) string {
	if why := NotCarried(ep, held); why != "" {
		return why
	}
	if now := Bound(ep); now != bound {
		return fmt.Sprintf("the endpoint's credential_binding changed (%q, opened with %q)", now, bound)
	}
	return ""
}

// Bound is the provider ep binds; "" for none (or no endpoint).
func Bound(ep *policy.Endpoint) string {
	if ep == nil || ep.CredentialBinding == nil {
		return ""
	}
	return ep.CredentialBinding.Provider
}

// accept is the Sec-WebSocket-Accept a server answers key with.
func accept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// Options is how Forward carries one WebSocket.
type Options struct {
	// Rewriter reads the client's frames (wsframe).
	Rewriter wsframe.Rewriter
	// Apply adds the bound provider's credential to the handshake
	// forwarded (nil: nothing).
	Apply func(out *http.Request)
	// Track keeps a connection taken from the server, to be closed if the
	// proxy stops, until the function it returns runs.
	Track func(io.Closer) (remove func())
	// Opened, when set, is told once the WebSocket is open how to end it
	// (a close with 1008 and the reason: a policy that no longer allows
	// it); it returns what to run once the WebSocket has ended.
	Opened func(end func(reason string)) (ended func())
}

// Forward forwards r, a WebSocket handshake the policy allowed, to up:
// the request line with path (canonical, escaped) and r's query, Host
// host, r's end-to-end fields without Sec-WebSocket-Extensions and with
// the credential (Options.Apply); and answers w with what the upstream
// answers (ctx ends the handshake, not the WebSocket). On 101 it takes
// w's connection and carries the WebSocket until either end closes it:
// the client's frames through Options.Rewriter, the server's as they
// come. It returns when both are closed, with the Refusal of a client's
// message, which closed it (1008), if any, else what ended it: a
// wsframe.ErrProtocol for a client that broke RFC 6455 (closed 1002), an
// upstream that failed, nil for a close.
func Forward(ctx context.Context, w http.ResponseWriter, r *http.Request, path, host string, up *h1.Pool, o Options) (*wsframe.Refusal, error) {
	unescaped, err := url.PathUnescape(path)
	if err != nil {
		answer(w, http.StatusBadRequest, "bad_request", "malformed request path")
		return nil, err
	}
	out := &http.Request{Method: r.Method, URL: &url.URL{Path: unescaped, RawPath: path, RawQuery: r.URL.RawQuery},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: r.Header.Clone(), Host: host}
	out.Header.Del("Sec-Websocket-Extensions")
	if o.Apply != nil {
		o.Apply(out)
	}
	res, conn, err := up.Upgrade(ctx, out, Protocol, w.Header())
	if err != nil {
		answer(w, http.StatusBadGateway, "upstream_unreachable", "the upstream could not be reached")
		return nil, err
	}
	if conn == nil { // refused, redirected…: the answer as it came
		defer res.Body.Close()
		h1.RemoveHopByHop(w.Header())
		w.WriteHeader(res.StatusCode)
		return nil, h1.CopyResponse(w, res.Body, false)
	}
	defer o.Track(conn)()
	defer conn.Close()
	if why := checkAnswer(res, out.Header.Get("Sec-Websocket-Key")); why != "" {
		clear(w.Header())
		answer(w, http.StatusBadGateway, "upstream_protocol_error", why)
		return nil, errors.New(why)
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		clear(w.Header())
		answer(w, http.StatusInternalServerError, "internal_error", "this connection cannot carry a WebSocket")
		return nil, err
	}
	defer o.Track(client)()
	defer client.Close()
	h1.RemoveHopByHop(res.Header)
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
	res.Header.Write(brw)
	brw.WriteString("\r\n")
	if err := brw.Flush(); err != nil {
		return nil, err
	}
	stop := make(chan string, 1)
	if o.Opened != nil {
		defer o.Opened(func(reason string) {
			select {
			case stop <- reason:
			default:
			}
		})()
	}
	err = relay(client, brw.Reader, conn, o.Rewriter, stop)
	var refusal *wsframe.Refusal
	if errors.As(err, &refusal) {
		return refusal, nil
	}
	return nil, err
}

// checkAnswer says why res, an upstream's 101 to a handshake with key, is
// not a WebSocket server's answer; "" when it is.
func checkAnswer(res *http.Response, key string) string {
	h := res.Header
	switch {
	case !strings.EqualFold(strings.TrimSpace(h.Get("Upgrade")), Protocol):
		return "the upstream switched to another protocol than websocket"
	case !httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade"):
		return "the upstream's 101 does not name Upgrade in Connection"
	case h.Get("Sec-Websocket-Accept") != accept(key):
		return "the upstream's Sec-WebSocket-Accept does not answer the handshake's key"
	case len(h["Sec-Websocket-Extensions"]) > 0:
		return "the upstream accepted a WebSocket extension the proxy did not offer"
	}
	return ""
}

// relay carries the WebSocket between client (what it sent already
// buffered in cr) and server until both are closed, or a reason comes
// on stop.
func relay(client net.Conn, cr *bufio.Reader, server io.ReadWriteCloser, rw wsframe.Rewriter, stop <-chan string) error {
	type ended struct {
		between bool // the last frame went whole: a close frame may follow
		err     error
	}
	up, down := make(chan error, 1), make(chan ended, 1)
	go func() { up <- rw.Relay(server, cr) }()
	go func() {
		between, err := copyFrames(client, server)
		down <- ended{between, err}
	}()
	// closeBoth ends both sides after the proxy's own close: the server's
	// frames stop, the client gets a close frame with code and reason when
	// it can go between two of them, and what the client still sends is
	// read and dropped until its close frame, its end, or lingerFor
	// (closing a socket with unread data resets it, and the client would
	// lose the close frame). upDone: the client's reader has returned.
	closeBoth := func(code uint16, reason string, upDone bool) {
		server.Close() // nothing more goes to it
		client.SetDeadline(time.Now().Add(lingerFor))
		if d := <-down; d.between {
			client.Write(closeFrame(code, reason))
		}
		if !upDone {
			<-up // its next write to the server fails, or its read times out
		}
		if (wsframe.Rewriter{}).Relay(io.Discard, cr) != nil { // nil: at its close frame
			io.Copy(io.Discard, cr)
		}
		client.Close()
	}
	var err error
	select {
	case d := <-down: // the server closed: so does the proxy
		client.Close()
		server.Close() // a write to it blocked (a half-closed server) ends
		<-up
		return d.err
	case reason := <-stop:
		closeBoth(1008, reason, false)
		return nil
	case err = <-up:
	}
	var refusal *wsframe.Refusal
	switch {
	case errors.As(err, &refusal):
		closeBoth(1008, refusal.Reason, true) // policy violation
	case errors.Is(err, wsframe.ErrProtocol):
		closeBoth(1002, "protocol error", true)
	case err == nil:
		// The client's close went upstream (or the client left): the
		// server's close comes back, then it closes.
		timer := time.NewTimer(closeWait)
		defer timer.Stop()
		select {
		case d := <-down:
			return d.err
		case <-timer.C:
			server.Close()
			<-down
		}
	default:
		server.Close()
		<-down
	}
	return err
}

// closeFrame is a server's close frame (unmasked) with code and as much
// of reason as a control frame holds.
func closeFrame(code uint16, reason string) []byte {
	if len(reason) > 123 {
		reason = strings.ToValidUTF8(reason[:123], "") // a cut rune dropped
	}
	f := make([]byte, 4, 4+len(reason))
	f[0], f[1] = 0x80|wsframe.OpClose, byte(2+len(reason))
	binary.BigEndian.PutUint16(f[2:], code)
	return append(f, reason...)
}

// frameBuffers are lent to copyFrames, a frame at a time, once its
// header has come: an idle WebSocket holds none.
var frameBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyFrames copies the server's frames from src to dst as they come
// (they are the server's to form: nothing is read in them but their
// length), each header written with what has come of its payload in one
// write, until src ends. It reports whether it stopped between frames.
func copyFrames(dst io.Writer, src io.Reader) (between bool, err error) {
	for {
		if between, err := copyFrame(dst, src); err != nil || between {
			return between, err
		}
	}
}

// copyFrame copies one frame; between (with a nil error) when src ended
// before it began.
func copyFrame(dst io.Writer, src io.Reader) (between bool, err error) {
	var hdr [10]byte
	if _, err := io.ReadFull(src, hdr[:2]); err != nil {
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return true, err
	}
	h := 2
	switch hdr[1] & 0x7F {
	case 126:
		h = 4
	case 127:
		h = 10
	}
	if _, err := io.ReadFull(src, hdr[2:h]); err != nil {
		return true, err // nothing of this frame was written
	}
	n := uint64(hdr[1] & 0x7F)
	switch h {
	case 4:
		n = uint64(binary.BigEndian.Uint16(hdr[2:4]))
	case 10:
		if n = binary.BigEndian.Uint64(hdr[2:10]); n>>63 != 0 {
			return true, errors.New("a server frame's length has its top bit set")
		}
	}
	if hdr[1]&0x80 != 0 {
		n += 4 // a masking key, which a server must not send: the client will refuse it
	}
	bp := frameBuffers.Get().(*[]byte)
	defer frameBuffers.Put(bp)
	buf := *bp
	copy(buf, hdr[:h])
	for first := true; first || n > 0; first = false {
		m, rerr := 0, error(nil)
		if c := int(min(n, uint64(len(buf)-h))); c > 0 {
			m, rerr = src.Read(buf[h : h+c]) // what has come
		}
		if m == 0 && rerr != nil {
			return first, cmpErr(rerr, io.ErrUnexpectedEOF) // first: nothing of it written
		}
		if _, err := dst.Write(buf[:h+m]); err != nil {
			return false, err
		}
		n -= uint64(m)
		h = 0
		if rerr != nil && n > 0 {
			return false, cmpErr(rerr, io.ErrUnexpectedEOF)
		}
	}
	return false, nil
}

func cmpErr(err, otherwise error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return otherwise
	}
	return err
}

// answer writes the proxy's own error answer, as the proxy writes them.
func answer(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": code, "detail": detail})
}
