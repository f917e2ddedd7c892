package wsframe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

// clientFrame encodes a frame as a client sends it, masked with key.
func clientFrame(fin bool, op byte, payload []byte, key [4]byte) []byte {
	b := []byte{op}
	if fin {
		b[0] |= 0x80
	}
	switch l := len(payload); {
	case l <= 125:
		b = append(b, 0x80|byte(l))
	case l <= 0xFFFF:
		b = append(b, 0x80|126, byte(l>>8), byte(l))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(l))
	}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

type outFrame struct {
	fin     bool
	op      byte
	payload string
}

// decode reads the frames Relay wrote, independently of readFrame:
// each must be masked, as a client's.
func decode(t *testing.T, b []byte) []outFrame {
	t.Helper()
	var out []outFrame
	for len(b) > 0 {
		if len(b) < 2 || b[1]&0x80 == 0 {
			t.Fatalf("an output frame that is not masked: % x", b)
		}
		fin, op, n, i := b[0]&0x80 != 0, b[0]&0x0F, int(b[1]&0x7F), 2
		switch n {
		case 126:
			n, i = int(binary.BigEndian.Uint16(b[2:4])), 4
		case 127:
			n, i = int(binary.BigEndian.Uint64(b[2:10])), 10
		}
		key := b[i : i+4]
		p := make([]byte, n)
		for j := range p {
			p[j] = b[i+4+j] ^ key[j%4]
		}
		out = append(out, outFrame{fin, op, string(p)})
		b = b[i+4+n:]
	}
	return out
}

var key = [4]byte{0x37, 0xfa, 0x21, 0x3d}

// RFC 6455 §5.7: "A single-frame masked text message" containing
// "Hello", byte for byte.
func TestRFCExample(t *testing.T) {
	in := []byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58}
	if !bytes.Equal(in, clientFrame(true, OpText, []byte("Hello"), key)) {
		t.Fatal("the test's encoder disagrees with the RFC's example")
	}
	var out bytes.Buffer
	if err := (Rewriter{Provider: "gh", Credential: Value([]byte("s3cr3t"))}).Relay(&out, bytes.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if got := decode(t, out.Bytes()); len(got) != 1 || got[0] != (outFrame{true, OpText, "Hello"}) {
		t.Fatalf("relayed %+v", got)
	}
}

// A placeholder split across fragments, a ping between them: the ping
// goes at once, the message as one frame with the credential in place.
func TestPlaceholderAcrossFragments(t *testing.T) {
	var in []byte
	in = append(in, clientFrame(false, OpText, []byte(`{"auth":"portcullis:pro`), key)...)
	in = append(in, clientFrame(true, OpPing, []byte("hb"), key)...)
	in = append(in, clientFrame(false, OpContinuation, []byte(`vider:gh","again":"portcullis:`), key)...)
	in = append(in, clientFrame(true, OpContinuation, []byte(`provider:gh"}`), key)...)
	in = append(in, clientFrame(true, OpClose, []byte{0x03, 0xe8}, key)...)
	in = append(in, clientFrame(true, OpText, []byte("after close"), key)...)
	var out bytes.Buffer
	if err := (Rewriter{Provider: "gh", Credential: Value([]byte("s3cr3t"))}).Relay(&out, bytes.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	got := decode(t, out.Bytes())
	want := []outFrame{{true, OpPing, "hb"}, {true, OpText, `{"auth":"s3cr3t","again":"s3cr3t"}`}, {true, OpClose, "\x03\xe8"}}
	if len(got) != len(want) {
		t.Fatalf("relayed %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("frame %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A large message (a 64-bit length) is rewritten too.
func TestLargeMessage(t *testing.T) {
	body := strings.Repeat("x", 70000) + "portcullis:provider:gh"
	var out bytes.Buffer
	if err := (Rewriter{Provider: "gh", Credential: Value([]byte("V"))}).Relay(&out, bytes.NewReader(clientFrame(true, OpText, []byte(body), key))); err != nil {
		t.Fatal(err)
	}
	if got := decode(t, out.Bytes()); len(got) != 1 || got[0].payload != strings.Repeat("x", 70000)+"V" {
		t.Fatalf("relayed %d frames", len(got))
	}
}

// What must not pass: each refused or an error, and nothing of the
// message forwarded (the frame before it is).
func TestRefused(t *testing.T) {
	ok := clientFrame(true, OpText, []byte("fine"), key)
	for _, c := range []struct {
		name     string
		in       []byte
		max      int
		refusal  bool // else a protocol error
		contains string
	}{
		{"another provider's placeholder", clientFrame(true, OpText, []byte("portcullis:provider:other"), key), 0, true, `"other"`},
		{"a longer name", clientFrame(true, OpText, []byte("portcullis:provider:gh2"), key), 0, true, `"gh2"`},
		{"the placeholder in capitals", clientFrame(true, OpText, []byte("PORTCULLIS:PROVIDER:gh"), key), 0, true, `"gh"`},
		{"a placeholder in a ping", clientFrame(true, OpPing, []byte("portcullis:provider:gh"), key), 0, true, "control frame"},
		{"a placeholder in a binary message", clientFrame(true, OpBinary, []byte("portcullis:provider:gh"), key), 0, true, `"gh"`},
		{"a message over the bound", append(clientFrame(false, OpText, []byte(strings.Repeat("a", 60)), key), clientFrame(true, OpContinuation, []byte(strings.Repeat("a", 60)), key)...), 100, true, "larger than 100"},
		{"a frame over the bound", clientFrame(true, OpText, []byte(strings.Repeat("a", 200)), key), 100, true, "larger than 100"},
		{"unmasked", []byte{0x81, 0x05, 'H', 'e', 'l', 'l', 'o'}, 0, false, "not masked"},
		{"reserved bits (compression)", func() []byte { b := clientFrame(true, OpText, []byte("x"), key); b[0] |= 0x40; return b }(), 0, false, "reserved bits"},
		{"a continuation with no message", clientFrame(true, OpContinuation, []byte("x"), key), 0, false, "no message open"},
		{"a new message inside one", append(clientFrame(false, OpText, []byte("a"), key), clientFrame(true, OpText, []byte("b"), key)...), 0, false, "before the last"},
		{"a fragmented ping", clientFrame(false, OpPing, []byte("a"), key), 0, false, "control frame"},
		{"a reserved opcode", clientFrame(true, 0x3, []byte("a"), key), 0, false, "reserved opcode"},
		{"cut short", clientFrame(true, OpText, []byte("Hello"), key)[:8], 0, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := (Rewriter{Provider: "gh", Credential: Value([]byte("s3cr3t")), MaxMessage: c.max}).Relay(&out, bytes.NewReader(append(bytes.Clone(ok), c.in...)))
			var r *Refusal
			switch {
			case c.refusal && !errors.As(err, &r):
				t.Fatalf("want a refusal, got %v", err)
			case !c.refusal && c.contains != "" && !errors.Is(err, ErrProtocol):
				t.Fatalf("want a protocol error, got %v", err)
			case c.contains == "" && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Fatalf("want io.ErrUnexpectedEOF, got %v", err)
			case !strings.Contains(err.Error(), c.contains):
				t.Fatalf("error %q does not say %q", err, c.contains)
			}
			if got := decode(t, out.Bytes()); len(got) != 1 || got[0].payload != "fine" {
				t.Fatalf("forwarded %+v; want only the frame before", got)
			}
		})
	}
}

// TestManyPlaceholders: a message made of the bound placeholder is
// rewritten in memory linear in its size (a review found each
// placeholder copying the rest of the message: 23 GB for 1 MiB), and a
// credential that would blow a message past twice the bound is refused.
func TestManyPlaceholders(t *testing.T) {
	msg := []byte(strings.Repeat("portcullis:provider:gh ", DefaultMaxMessage/23))
	in := clientFrame(true, OpText, msg, [4]byte{1, 2, 3, 4})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var out bytes.Buffer
	if err := (Rewriter{Provider: "gh", Credential: Value([]byte("V"))}).Relay(&out, bytes.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := decode(t, out.Bytes()); len(got) != 1 || string(got[0].payload) != strings.Repeat("V ", DefaultMaxMessage/23) {
		t.Fatalf("the message was not rewritten whole")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16*uint64(len(msg)) {
		t.Errorf("rewriting %d bytes allocated %d bytes: not linear", len(msg), alloc)
	}
	long := Value(bytes.Repeat([]byte("j"), 1024)) // a JWT, say
	out.Reset()
	err := (Rewriter{Provider: "gh", Credential: long}).Relay(&out, bytes.NewReader(in))
	var refusal *Refusal
	if !errors.As(err, &refusal) || out.Len() != 0 {
		t.Errorf("a message grown 45 times: %v, %d bytes out; want a refusal and nothing out", err, out.Len())
	}
}

func FuzzRelay(f *testing.F) {
	f.Add(clientFrame(true, OpText, []byte("portcullis:provider:gh"), key))
	f.Add([]byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58})
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		err := (Rewriter{Provider: "gh", Credential: Value([]byte("s3cr3t")), MaxMessage: 4096}).Relay(&out, bytes.NewReader(in))
		if err == nil || errors.As(err, new(*Refusal)) || errors.Is(err, ErrProtocol) || errors.Is(err, io.ErrUnexpectedEOF) {
			for _, f := range decode(t, out.Bytes()) {
				if strings.Contains(strings.ToLower(f.payload), "portcullis:provider:") {
					t.Fatalf("a placeholder was forwarded: %q", f.payload)
				}
			}
			return
		}
		t.Fatalf("unexpected error %v", err)
	})
}

// TestMask: masking eight bytes at a time is the byte-wise XOR of RFC
// 6455 §5.3, at every length and alignment of the tail.
func TestMask(t *testing.T) {
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	for n := 0; n <= 40; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + 3)
		}
		want := bytes.Clone(b)
		for i := range want {
			want[i] ^= key[i%4]
		}
		mask(b, key)
		if !bytes.Equal(b, want) {
			t.Errorf("length %d: % x, want % x", n, b, want)
		}
	}
}

// TestGrowthBoundCountsTheTail: the text after the last placeholder
// counts toward the bound on a rewritten message (a review found a
// message grown to 2.3 times the bound through).
func TestGrowthBoundCountsTheTail(t *testing.T) {
	msg := "portcullis:provider:gh " + strings.Repeat("a", 77) // 100 bytes
	in := clientFrame(true, OpText, []byte(msg), [4]byte{9, 8, 7, 6})
	var out bytes.Buffer
	err := (Rewriter{Provider: "gh", Credential: Value(bytes.Repeat([]byte("c"), 150)), MaxMessage: 100}).Relay(&out, bytes.NewReader(in))
	var refusal *Refusal
	if !errors.As(err, &refusal) || out.Len() != 0 {
		t.Errorf("a 100-byte message rewritten to 228 bytes under a bound of 100: %v, %d bytes out; want a refusal", err, out.Len())
	}
}
