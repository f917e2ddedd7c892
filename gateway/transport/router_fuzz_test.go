package transport

import (
	"bytes"
	"io"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// splitConn is a client connection that sends data in pieces whose sizes
// come from splits, then EOF; what the router writes is kept.
type splitConn struct {
	net.Conn // nil: the router's peek reads and writes only
	data     []byte
	splits   []byte
	k        int
	read     int
	reads    int
	wrote    bytes.Buffer
}

func (c *splitConn) Read(p []byte) (int, error) {
	c.reads++
	if c.reads > len(c.data)+64 {
		// Every read returns a byte or EOF: more reads than that is a
		// loop that would never end.
		panic("the router keeps reading after EOF")
	}
	if c.read == len(c.data) {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data)-c.read)
	if len(c.splits) > 0 {
		n = min(n, 1+int(c.splits[c.k%len(c.splits)]))
		c.k++
	}
	copy(p, c.data[c.read:c.read+n])
	c.read += n
	return n, nil
}

func (c *splitConn) Write(p []byte) (int, error) { return c.wrote.Write(p) }

// h2First is an HTTP/2 client's start: preface, SETTINGS, WINDOW_UPDATE,
// the first HEADERS (split into a CONTINUATION) and, if ackFirst, the ACK
// of the server's SETTINGS before them (else after).
func h2First(path, contentType string, ackFirst bool) (start, ack []byte) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "gateway"}, {Name: ":path", Value: path},
		{Name: "content-type", Value: contentType}, {Name: "te", Value: "trailers"},
	} {
		enc.WriteField(f)
	}
	block := hb.Bytes()
	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	fr.WriteWindowUpdate(0, 1<<20)
	if ackFirst {
		fr.WriteSettingsAck()
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:10]})
	fr.WriteContinuation(1, true, block[10:])
	return out.Bytes(), settingsAck
}

// FuzzRouter: the router's peek never panics and never reads without
// bound, whatever a client sends and however its bytes arrive; an HTTP/1.1
// request and an HTTP/2 start are routed the same whatever the read split,
// and the chosen server is replayed exactly what the router read (less the
// ACK of the router's SETTINGS).
func FuzzRouter(f *testing.F) {
	grpcStart, _ := h2First(portcullisv1connect.DistributionServiceStreamPolicyProcedure, "application/grpc", false)
	for _, s := range [][]byte{
		[]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
		{0x16, 0x03, 0x01, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o'},
		[]byte("PRI * HTTP/2.0\r\n\r\nSM"),
		[]byte(http2.ClientPreface),
		append(append([]byte{}, grpcStart...), settingsAck...),
		append([]byte(http2.ClientPreface), 0xff, 0xff, 0xff, 0x01, 0, 0, 0, 0, 1),
		append([]byte(http2.ClientPreface), 0, 0, 0, 0x09, 0x04, 0, 0, 0, 1), // CONTINUATION alone
	} {
		f.Add(s, []byte{0})
		f.Add(s, []byte{3, 0, 200})
	}
	r := &router{toGRPC: grpcRoute}
	preface := []byte(http2.ClientPreface)
	f.Fuzz(func(t *testing.T, data, splits []byte) {
		// Anything at all.
		c := &splitConn{data: data, splits: splits}
		replay, _, err := r.peek(c)
		if c.read > len(preface)+maxRouteBytes+16<<10+9 {
			t.Fatalf("the router read %d bytes before routing", c.read)
		}
		if err == nil {
			switch {
			case !bytes.HasPrefix(data, preface):
				if !bytes.Equal(replay, data[:c.read]) {
					t.Fatalf("replay %q, read %q", replay, data[:c.read])
				}
			case len(replay) != c.read-len(settingsAck) || !bytes.HasPrefix(replay, preface):
				t.Fatalf("HTTP/2: replay of %d bytes after reading %d", len(replay), c.read)
			}
		}

		// An HTTP/1.1 request, whatever follows it.
		h1 := append([]byte("POST /portcullis.v1.DistributionService/StreamPolicy HTTP/1.1\r\nHost: x\r\n\r\n"), data...)
		c = &splitConn{data: h1, splits: splits}
		replay, toGRPC, err := r.peek(c)
		if err != nil || toGRPC || len(replay) == 0 || !bytes.Equal(replay, h1[:c.read]) {
			t.Fatalf("HTTP/1.1: replay %q, gRPC %v, err %v", replay, toGRPC, err)
		}

		// HTTP/2 starts, the ACK before or after the first HEADERS.
		for _, tc := range []struct {
			path, contentType string
			ackFirst, grpc    bool
		}{
			{portcullisv1connect.DistributionServiceStreamPolicyProcedure, "application/grpc", false, true},
			{portcullisv1connect.DistributionServiceShipDecisionsProcedure, "application/grpc+proto", true, true},
			{portcullisv1connect.DistributionServiceStreamPolicyProcedure, "application/connect+proto", false, false},
			{portcullisv1connect.PolicyServiceGetPolicyProcedure, "application/grpc", true, false},
		} {
			start, ack := h2First(tc.path, tc.contentType, tc.ackFirst)
			in := append(append([]byte{}, start...), data...)
			want := start
			if !tc.ackFirst {
				in = append(append(append([]byte{}, start...), ack...), data...)
			} else {
				// The ACK sits inside start; the server must not see it.
				i := bytes.Index(start, ack)
				want = append(append([]byte{}, start[:i]...), start[i+len(ack):]...)
			}
			c = &splitConn{data: in, splits: splits}
			replay, toGRPC, err := r.peek(c)
			if err != nil || toGRPC != tc.grpc || !bytes.Equal(replay, want) {
				t.Fatalf("HTTP/2 %s %s: gRPC %v, err %v, replay %q, want %q", tc.path, tc.contentType, toGRPC, err, replay, want)
			}
		}
	})
}
