package openshell

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane/wsframe"
)

// The relay tests of OpenShell's WebSocket inspection (l7/websocket.rs at
// OpenShell 0dc1f493: relay_client_to_server, what a client sends on an
// endpoint with websocket_credential_rewrite), run through the proxy's
// client-side relay, wsframe.Rewriter.Relay, with the provider "gh" bound
// and its credential "real-token". OpenShell's placeholder
// (openshell:resolve:env:NAME) is spelled as ours is
// (portcullis:provider:NAME). The GraphQL-over-WebSocket tests are not
// ported: protocol websocket endpoints are not inspected (they deny).

const websocketRS = "crates/openshell-supervisor-network/src/l7/websocket.rs: "

// Divergences of the WebSocket relay.
const (
	// divNoDeflate: the proxy removes Sec-WebSocket-Extensions from the
	// handshake, so permessage-deflate is never negotiated and a frame
	// with RSV1 is a protocol error; OpenShell negotiates it and inflates
	// client text messages to rewrite them.
	divNoDeflate = "permessage-deflate is not negotiated"
	// divStopAtClose: the relay stops reading at the client's close frame
	// (the WebSocket is closing); what follows is never read or
	// forwarded, where OpenShell reads one more frame to fail on it.
	divStopAtClose = "the relay stops at the client's close frame"
)

// wsMessage is one frame the upstream receives, unmasked.
type wsMessage struct {
	Op      byte
	Payload string
}

type wsCase struct {
	Source string
	// In is what the client sends: whole frames, masked as a client's.
	In []byte
	// OpenShell is what its test asserts: the frames the upstream gets,
	// in order, or (Fails) the relay failing, with nothing of the failing
	// message forwarded.
	OpenShell []wsMessage
	Fails     bool

	Divergence string
	Ours       []wsMessage
	OursFails  bool
}

const (
	wsToken = "real-token"
	wsPH    = "portcullis:provider:gh"
)

var wsMask = [4]byte{0x37, 0xfa, 0x21, 0x3d}

// maskedFrame is a client's frame, its length in minimal form.
func maskedFrame(fin bool, op, rsv byte, payload []byte) []byte {
	b0 := op | rsv
	if fin {
		b0 |= 0x80
	}
	f := []byte{b0}
	switch n := len(payload); {
	case n <= 125:
		f = append(f, 0x80|byte(n))
	case n <= 0xFFFF:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	f = append(f, wsMask[:]...)
	for i, c := range payload {
		f = append(f, c^wsMask[i%4])
	}
	return f
}

func text(fin bool, s string) []byte { return maskedFrame(fin, wsframe.OpText, 0, []byte(s)) }

func closePayload(code uint16, reason []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, code), reason...)
}

func joined(frames ...[]byte) []byte { return bytes.Join(frames, nil) }

var wsCases = []wsCase{
	{Source: websocketRS + "rewrites_discord_like_identify_text_payload",
		In:        text(true, `{"op":2,"d":{"token":"`+wsPH+`"}}`),
		OpenShell: []wsMessage{{wsframe.OpText, `{"op":2,"d":{"token":"real-token"}}`}}},
	{Source: websocketRS + "upgraded_relay_rewrites_client_text_before_upstream_receives_it",
		In:        text(true, `{"op":2,"d":{"token":"`+wsPH+`"}}`),
		OpenShell: []wsMessage{{wsframe.OpText, `{"op":2,"d":{"token":"real-token"}}`}}},
	{Source: websocketRS + "text_without_placeholder_passes_semantically_unchanged",
		In:        text(true, `{"op":1,"d":42}`),
		OpenShell: []wsMessage{{wsframe.OpText, `{"op":1,"d":42}`}}},
	{Source: websocketRS + "unknown_placeholder_fails_closed",
		In:    text(true, `{"token":"portcullis:provider:UNKNOWN"}`),
		Fails: true},
	{Source: websocketRS + "fragmented_text_rewrites_after_final_continuation",
		In:        joined(text(false, `{"token":"`+wsPH), maskedFrame(true, wsframe.OpContinuation, 0, []byte(`"}`))),
		OpenShell: []wsMessage{{wsframe.OpText, `{"token":"real-token"}`}}},
	{Source: websocketRS + "rejects_rsv_bits",
		In:    maskedFrame(true, wsframe.OpText, 0x40, []byte("hello")),
		Fails: true},
	{Source: websocketRS + "rejects_unmasked_client_frame",
		In:    []byte{0x80 | wsframe.OpText, 5, 'h', 'e', 'l', 'l', 'o'},
		Fails: true},
	{Source: websocketRS + "rejects_invalid_utf8_text",
		In:    maskedFrame(true, wsframe.OpText, 0, []byte{0xff}),
		Fails: true},
	{Source: websocketRS + "rejects_oversize_text_message",
		In:    text(true, strings.Repeat("a", wsframe.DefaultMaxMessage+1)),
		Fails: true},
	{Source: websocketRS + "fragmented_text_allows_interleaved_ping_pong_and_rewrites_at_completion",
		In: joined(text(false, `{"token":"`+wsPH), maskedFrame(true, wsframe.OpPing, 0, []byte("p")),
			maskedFrame(true, wsframe.OpPong, 0, []byte("q")), maskedFrame(true, wsframe.OpContinuation, 0, []byte(`"}`))),
		OpenShell: []wsMessage{{wsframe.OpPing, "p"}, {wsframe.OpPong, "q"}, {wsframe.OpText, `{"token":"real-token"}`}}},
	{Source: websocketRS + "compressed_text_rewrites_with_permessage_deflate",
		In:         maskedFrame(true, wsframe.OpText, 0x40, []byte{0xaa, 0x56, 0x2a}), // deflated bytes: RSV1 is what matters
		OpenShell:  []wsMessage{{wsframe.OpText, `{"token":"real-token"}`}},
		Divergence: divNoDeflate, OursFails: true},
	{Source: websocketRS + "compressed_text_rejects_decompressed_oversize_message",
		In:    maskedFrame(true, wsframe.OpText, 0x40, []byte{0x4a, 0x4c, 0x1c}),
		Fails: true},
	{Source: websocketRS + "binary_frame_passes_through_unchanged",
		In:        maskedFrame(true, wsframe.OpBinary, 0, []byte{0, 1, 2, 3, 255}),
		OpenShell: []wsMessage{{wsframe.OpBinary, "\x00\x01\x02\x03\xff"}}},
	{Source: websocketRS + "rejects_reserved_opcode",
		In:    maskedFrame(true, 0x3, 0, []byte("reserved")),
		Fails: true},
	{Source: websocketRS + "rejects_continuation_without_active_message",
		In:    maskedFrame(true, wsframe.OpContinuation, 0, []byte("orphan")),
		Fails: true},
	{Source: websocketRS + "rejects_new_data_frame_before_fragment_completion",
		In:    joined(text(false, "partial"), text(true, "second")),
		Fails: true},
	{Source: websocketRS + "rejects_fragmented_control_frame",
		In:    maskedFrame(false, wsframe.OpPing, 0, []byte("ping")),
		Fails: true},
	{Source: websocketRS + "rejects_control_frame_over_125_bytes",
		In:    maskedFrame(true, wsframe.OpPing, 0, bytes.Repeat([]byte("a"), 126)),
		Fails: true},
	{Source: websocketRS + "rejects_non_minimal_extended_length",
		In:    joined([]byte{0x80 | wsframe.OpText, 0x80 | 126, 0, 5}, wsMask[:], maskedFrame(true, wsframe.OpText, 0, []byte("hello"))[6:]),
		Fails: true},
	{Source: websocketRS + "rejects_oversize_binary_frame_before_payload_buffering",
		In:    joined([]byte{0x80 | wsframe.OpBinary, 0x80 | 127}, binary.BigEndian.AppendUint64(nil, 16<<20+1), wsMask[:]),
		Fails: true},
	{Source: websocketRS + "validates_close_frame_payloads",
		In:        maskedFrame(true, wsframe.OpClose, 0, closePayload(1000, []byte("done"))),
		OpenShell: []wsMessage{{wsframe.OpClose, string(closePayload(1000, []byte("done")))}}},
	{Source: websocketRS + "rejects_close_frame_with_one_byte_payload",
		In:    maskedFrame(true, wsframe.OpClose, 0, []byte{0x03}),
		Fails: true},
	{Source: websocketRS + "rejects_reserved_close_code",
		In:    maskedFrame(true, wsframe.OpClose, 0, closePayload(1005, nil)),
		Fails: true},
	{Source: websocketRS + "rejects_close_reason_with_invalid_utf8",
		In:    maskedFrame(true, wsframe.OpClose, 0, closePayload(1000, []byte{0xff})),
		Fails: true},
	{Source: websocketRS + "rejects_frames_after_client_close_frame",
		In:         joined(maskedFrame(true, wsframe.OpClose, 0, closePayload(1000, []byte("done"))), text(true, "late")),
		Fails:      true,
		Divergence: divStopAtClose, Ours: []wsMessage{{wsframe.OpClose, string(closePayload(1000, []byte("done")))}}},
}

// relayOut runs in through the relay with gh bound; it returns the frames
// the upstream got and the relay's error.
func relayOut(t *testing.T, in []byte) ([]wsMessage, error) {
	t.Helper()
	var out bytes.Buffer
	rw := wsframe.Rewriter{Provider: "gh", Credential: wsframe.Value([]byte(wsToken))}
	err := rw.Relay(&out, bytes.NewReader(in))
	var got []wsMessage
	for r := bytes.NewReader(out.Bytes()); r.Len() > 0; {
		m, ferr := readMasked(r)
		if ferr != nil {
			t.Fatalf("the relay wrote a malformed frame: %v", ferr)
		}
		got = append(got, m)
	}
	return got, err
}

// readMasked reads one whole masked frame.
func readMasked(r io.Reader) (wsMessage, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return wsMessage{}, err
	}
	if h[0]&0x80 == 0 || h[0]&0x70 != 0 || h[1]&0x80 == 0 {
		return wsMessage{}, fmt.Errorf("a frame that is not final, has reserved bits or is not masked: % x", h)
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return wsMessage{}, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return wsMessage{}, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	var key [4]byte
	if _, err := io.ReadFull(r, key[:]); err != nil {
		return wsMessage{}, err
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return wsMessage{}, err
	}
	for i := range p {
		p[i] ^= key[i%4]
	}
	return wsMessage{h[0] & 0x0F, string(p)}, nil
}

func TestWebSocketRelay(t *testing.T) {
	for _, c := range wsCases {
		t.Run(strings.TrimPrefix(c.Source, websocketRS), func(t *testing.T) {
			if (c.Divergence == "") != (c.Ours == nil && !c.OursFails) {
				t.Fatalf("%s: Divergence and Ours go together", c.Source)
			}
			want, fails := c.OpenShell, c.Fails
			if c.Divergence != "" {
				want, fails = c.Ours, c.OursFails
			}
			got, err := relayOut(t, c.In)
			var refusal *wsframe.Refusal
			switch {
			case fails && err == nil:
				t.Errorf("%s: the relay took it (%d frames out), want it to fail", c.Source, len(got))
			case fails && !errors.Is(err, wsframe.ErrProtocol) && !errors.As(err, &refusal):
				t.Errorf("%s: failed with %v, want a protocol error or a refusal", c.Source, err)
			case !fails && err != nil:
				t.Errorf("%s: %v", c.Source, err)
			}
			if fails {
				want = nil // nothing of the failing message goes upstream
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: the upstream got %q, want %q (divergence: %q)", c.Source, got, want, c.Divergence)
			}
			if err != nil && (strings.Contains(err.Error(), wsToken) || strings.Contains(err.Error(), `"op"`)) {
				// websocket_ocsf_messages_do_not_include_payload_or_secret_material
				t.Errorf("%s: the error %q holds the secret or the payload", c.Source, err)
			}
		})
	}
}
