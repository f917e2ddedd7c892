// Package wsframe reads the frames a WebSocket client sends (RFC 6455 §5)
// and writes them on, with the credential placeholders of one provider in
// its text messages replaced by the credential: what an endpoint's
// websocket_credential_rewrite asks of the proxy. It knows nothing of
// HTTP or policies; the proxy hands it the two sides of an upgraded
// connection (client → server only: the server's frames are relayed as
// they come).
//
// A text message is read whole (its fragments joined, within
// Rewriter.MaxMessage), its placeholders of the bound provider replaced,
// and written as one frame, masked with a fresh key as a client's must
// be. A placeholder of another provider, in a text or a binary message,
// is a Refusal: the caller closes the connection with 1008 (policy
// violation) and nothing of that message is forwarded. Control frames
// (close, ping, pong) pass at once, between fragments too, unless they
// hold a placeholder (refused: a credential never goes in one). Frames with
// reserved bits (an extension the proxy removed from the handshake, such
// as permessage-deflate, whose frames it could not read), unmasked
// frames and malformed ones (a length not in its minimal form, a text
// message or a close reason that is not UTF-8, a close code no peer may
// send, a reserved opcode) are errors.
package wsframe

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/portcullis-dev/portcullis/provider"
)

// The opcodes (RFC 6455 §5.2).
const (
	OpContinuation = 0x0
	OpText         = 0x1
	OpBinary       = 0x2
	OpClose        = 0x8
	OpPing         = 0x9
	OpPong         = 0xA
)

// Rewriter replaces Provider's placeholders in text messages by the
// credential.
type Rewriter struct {
	Provider string
	// Credential returns the value that replaces Provider's
	// placeholders, asked for each message that holds one (what is held
	// when the message is sent: a rotation reaches an open WebSocket); a
	// reason instead refuses the message, with its code.
	Credential func() (value []byte, code, reason string)
	// MaxMessage bounds a message read whole (default 1 MiB).
	MaxMessage int
}

// Value is a Credential that is always value.
func Value(value []byte) func() ([]byte, string, string) {
	return func() ([]byte, string, string) { return value, "", "" }
}

// DefaultMaxMessage is MaxMessage's default.
const DefaultMaxMessage = 1 << 20

// Refusal is a message the proxy must not forward: the connection is
// closed with 1008. Code is CodePlaceholder when a placeholder is why.
type Refusal struct{ Code, Reason string }

// CodePlaceholder is the reason code (a decision record's) of a message
// refused for a placeholder: dataplane/credentials' CodePlaceholder.
const CodePlaceholder = "credential_placeholder"

func (r *Refusal) Error() string { return r.Reason }

// ErrProtocol wraps a client's frame that breaks RFC 6455.
var ErrProtocol = errors.New("websocket protocol error")

func protocolf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// frame is one frame read: its first byte's flags and opcode, and the
// payload unmasked.
type frame struct {
	fin     bool
	opcode  byte
	payload []byte
}

// Relay copies client frames from src to dst until src ends (io.EOF:
// nil), a close frame has been relayed (nil), or an error: a *Refusal,
// an ErrProtocol, or the connection's.
func (rw Rewriter) Relay(dst io.Writer, src io.Reader) error {
	max := rw.MaxMessage
	if max <= 0 {
		max = DefaultMaxMessage
	}
	var (
		msg     []byte // the message being joined, when fragmented
		msgOp   byte   // its opcode; 0 when none is open
		hdr     [14]byte
		scratch []byte // the last frame's payload
		wbuf    []byte // the frame written
	)
	for {
		f, err := readFrame(src, &hdr, &scratch, max)
		if err != nil {
			if errors.Is(err, io.EOF) {
				if msgOp == 0 {
					return nil
				}
				return io.ErrUnexpectedEOF // a message left without its final fragment
			}
			return err
		}
		switch {
		case f.opcode == OpClose || f.opcode == OpPing || f.opcode == OpPong: // control: whole, at once
			if provider.IndexPlaceholder(f.payload) >= 0 { // a ping's data, a close's reason
				return &Refusal{Code: CodePlaceholder, Reason: "a WebSocket control frame holds a placeholder"}
			}
			if f.opcode == OpClose {
				if err := checkClose(f.payload); err != nil {
					return err
				}
			}
			if err := writeFrame(dst, &wbuf, f.opcode, f.payload); err != nil {
				return err
			}
			if f.opcode == OpClose {
				return nil
			}
			continue
		case f.opcode == OpContinuation:
			if msgOp == 0 {
				return protocolf("a continuation frame with no message open")
			}
		case f.opcode == OpText || f.opcode == OpBinary:
			if msgOp != 0 {
				return protocolf("a new message before the last one's final fragment")
			}
			msgOp = f.opcode
		default:
			return protocolf("reserved opcode 0x%x", f.opcode)
		}
		if len(msg)+len(f.payload) > max {
			return &Refusal{Reason: fmt.Sprintf("a WebSocket message larger than %d bytes cannot be inspected", max)}
		}
		whole := f.payload // a message in one frame is not copied
		if !f.fin || len(msg) > 0 {
			if msg = append(msg, f.payload...); !f.fin {
				continue
			}
			whole = msg
		}
		if msgOp == OpText && !utf8.Valid(whole) {
			return protocolf("a text message that is not valid UTF-8")
		}
		out, err := rw.rewrite(msgOp, whole, max)
		if err != nil {
			return err
		}
		if err := writeFrame(dst, &wbuf, msgOp, out); err != nil {
			return err
		}
		msgOp = 0
		// The buffers stay for the next message, unless a large one
		// grew them: an open WebSocket does not keep megabytes.
		msg, scratch, wbuf = keep(msg), keep(scratch), keep(wbuf)
	}
}

// kept bounds the buffers a Relay keeps between messages.
const kept = 128 << 10

func keep(b []byte) []byte {
	if cap(b) > kept {
		return nil
	}
	return b[:0]
}

// rewrite returns msg with the bound provider's placeholders replaced
// (text), or a Refusal for another provider's, or for a message that the
// credentials would make larger than twice max.
func (rw Rewriter) rewrite(op byte, msg []byte, max int) ([]byte, error) {
	placeholder := []byte(provider.Placeholder(rw.Provider))
	var out, value []byte // out: nil until the first placeholder
	rest := msg
	for {
		at := provider.IndexPlaceholder(rest)
		if at < 0 {
			break
		}
		// The placeholder alone, as a name is at most 63 bytes: the rest
		// of the message is not copied once a placeholder.
		name, _, _ := provider.FindPlaceholder(string(rest[at:min(len(rest), at+len(provider.PlaceholderPrefix)+64)]))
		exact := bytes.HasPrefix(rest[at:], placeholder) && len(name) == len(rw.Provider)
		if op != OpText || rw.Provider == "" || rw.Credential == nil || !exact {
			return nil, &Refusal{Code: CodePlaceholder, Reason: fmt.Sprintf("a WebSocket message holds the placeholder of provider %q, which this endpoint does not rewrite", name)}
		}
		if out == nil {
			var code, reason string
			if value, code, reason = rw.Credential(); reason != "" {
				return nil, &Refusal{Code: code, Reason: reason}
			}
			out = make([]byte, 0, len(msg)+len(value))
		}
		if len(out)+at+len(value) > 2*max {
			return nil, &Refusal{Reason: fmt.Sprintf("a WebSocket message would be larger than %d bytes with its credentials", 2*max)}
		}
		out = append(append(out, rest[:at]...), value...)
		rest = rest[at+len(placeholder):]
	}
	if out == nil {
		return msg, nil
	}
	if len(out)+len(rest) > 2*max {
		return nil, &Refusal{Reason: fmt.Sprintf("a WebSocket message would be larger than %d bytes with its credentials", 2*max)}
	}
	return append(out, rest...), nil
}

// readFrame reads one client frame, its payload unmasked into *scratch
// (reused), refusing a payload over max.
func readFrame(r io.Reader, hdr *[14]byte, scratch *[]byte, max int) (frame, error) {
	if _, err := io.ReadFull(r, hdr[:2]); err != nil {
		return frame{}, err
	}
	b0, b1 := hdr[0], hdr[1]
	if b0&0x70 != 0 {
		return frame{}, protocolf("reserved bits set (an extension was not negotiated)")
	}
	f := frame{fin: b0&0x80 != 0, opcode: b0 & 0x0F}
	if b1&0x80 == 0 {
		return frame{}, protocolf("a client frame that is not masked")
	}
	n := uint64(b1 & 0x7F)
	switch n {
	case 126:
		if _, err := io.ReadFull(r, hdr[2:4]); err != nil {
			return frame{}, noEOF(err)
		}
		if n = uint64(binary.BigEndian.Uint16(hdr[2:4])); n < 126 {
			return frame{}, protocolf("a payload length not in its minimal form")
		}
	case 127:
		if _, err := io.ReadFull(r, hdr[2:10]); err != nil {
			return frame{}, noEOF(err)
		}
		n = binary.BigEndian.Uint64(hdr[2:10])
		if n>>63 != 0 {
			return frame{}, protocolf("a payload length with its top bit set")
		}
		if n <= 0xFFFF {
			return frame{}, protocolf("a payload length not in its minimal form")
		}
	}
	if f.opcode >= 0x8 && (n > 125 || !f.fin) {
		return frame{}, protocolf("a control frame longer than 125 bytes or fragmented")
	}
	if n > uint64(max) {
		return frame{}, &Refusal{Reason: fmt.Sprintf("a WebSocket frame larger than %d bytes cannot be inspected", max)}
	}
	var key [4]byte
	if _, err := io.ReadFull(r, key[:]); err != nil {
		return frame{}, noEOF(err)
	}
	if cap(*scratch) < int(n) {
		*scratch = make([]byte, n)
	}
	p := (*scratch)[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		return frame{}, noEOF(err)
	}
	mask(p, key)
	f.payload = p
	return f, nil
}

// checkClose checks a close frame's payload (RFC 6455 §5.5.1, §7.4): none,
// or a status code a peer may send and a reason in UTF-8.
func checkClose(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if len(p) == 1 {
		return protocolf("a close frame with a one-byte payload")
	}
	switch code := binary.BigEndian.Uint16(p); {
	case code < 1000, code >= 1004 && code <= 1006, code >= 1015 && code < 3000, code >= 5000:
		return protocolf("a close frame with status code %d, which may not be sent", code)
	}
	if !utf8.Valid(p[2:]) {
		return protocolf("a close frame whose reason is not valid UTF-8")
	}
	return nil
}

// noEOF: a frame cut short is not a clean end.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// writeFrame writes one final frame masked with a fresh key, as a
// client's, built in *buf (grown as needed) and written at once.
func writeFrame(w io.Writer, buf *[]byte, op byte, payload []byte) error {
	b := append((*buf)[:0], 0x80|op)
	switch l := len(payload); {
	case l <= 125:
		b = append(b, 0x80|byte(l))
	case l <= 0xFFFF:
		b = binary.BigEndian.AppendUint16(append(b, 0x80|126), uint16(l))
	default:
		b = binary.BigEndian.AppendUint64(append(b, 0x80|127), uint64(l))
	}
	var key [4]byte
	if _, err := rand.Read(key[:]); err != nil {
		return err
	}
	b = append(b, key[:]...)
	n := len(b)
	b = append(b, payload...)
	mask(b[n:], key)
	*buf = b
	_, err := w.Write(b)
	return err
}

// mask masks (or unmasks) b with key (RFC 6455 §5.3), eight bytes at a
// time.
func mask(b []byte, key [4]byte) {
	k := uint64(binary.LittleEndian.Uint32(key[:]))
	k |= k << 32
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:])^k)
	}
	for ; i < len(b); i++ { // i is a multiple of 4 here
		b[i] ^= key[i%4]
	}
}
