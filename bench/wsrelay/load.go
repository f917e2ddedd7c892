package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

// maxPerConn bounds the round trips one connection makes in one slot,
// whatever -duration says.
const maxPerConn = 1 << 20

// slotGrace is how long past its measured time a slot may take before its
// round trips are abandoned (a stalled connection fails the run, never
// hangs it).
const slotGrace = 30 * time.Second

// scenario is one kind of load: conns connections, each sending one
// message of size bytes of type typ and reading its echo before the next.
type scenario struct {
	Name    string
	conns   int
	size    int
	typ     websocket.MessageType
	latency bool // keep every round trip's time (p50, p99)
	payload []byte
}

func scenarios(conns int) []*scenario {
	return []*scenario{
		{Name: "1 KiB text, 1 conn", conns: 1, size: 1 << 10, typ: websocket.MessageText, latency: true},
		{Name: fmt.Sprintf("1 KiB text, %d conns", conns), conns: conns, size: 1 << 10, typ: websocket.MessageText},
		{Name: "64 KiB binary, 1 conn", conns: 1, size: 64 << 10, typ: websocket.MessageBinary},
	}
}

// textPayload is size bytes of JSON, as an agent's realtime API sends:
// ASCII text with no placeholder (the proxy holds no credential, and
// would refuse a message naming one).
func textPayload(size int) []byte {
	head := `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"`
	tail := `"}]}}`
	body := strings.Repeat("the quick brown fox jumps over the lazy dog ", size/44+1)
	return []byte(head + body[:size-len(head)-len(tail)] + tail)
}

func (s *scenario) makePayload() {
	if s.typ == websocket.MessageText {
		s.payload = textPayload(s.size)
		return
	}
	s.payload = make([]byte, s.size)
	rand.Read(s.payload)
}

// path is one way to the upstream, with its connections open for the
// whole run (each scenario uses the first conns of them).
type path struct {
	name   string
	conns  []*websocket.Conn
	bufs   []*bytes.Buffer
	hopPID int // the process between client and upstream (the proxy, the relay); 0 on the direct path
}

// client is the HTTP client a path's handshakes go through: straight to
// the upstream, or to the proxy as absolute-form requests. Never the
// environment's proxy settings.
func client(proxy *url.URL) *http.Client {
	tr := &http.Transport{}
	if proxy != nil {
		tr.Proxy = http.ProxyURL(proxy)
	}
	return &http.Client{Transport: tr}
}

// dial opens a WebSocket to the upstream's u through hc.
func dial(ctx context.Context, hc *http.Client, u string, mode websocket.CompressionMode) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, res, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc, CompressionMode: mode})
	if c != nil {
		c.SetReadLimit(maxMessage)
	}
	return c, res, err
}

// open dials n connections for the path.
func (p *path) open(ctx context.Context, hc *http.Client, u string, n int) error {
	for range n {
		c, _, err := dial(ctx, hc, u, websocket.CompressionDisabled)
		if err != nil {
			return fmt.Errorf("%s: dial %s: %w", p.name, u, err)
		}
		p.conns = append(p.conns, c)
		p.bufs = append(p.bufs, &bytes.Buffer{})
	}
	return nil
}

// close ends the path's connections with a close handshake, all at once.
func (p *path) close() {
	var wg sync.WaitGroup
	for _, c := range p.conns {
		wg.Go(func() { c.Close(websocket.StatusNormalClosure, "") })
	}
	wg.Wait()
}

// readInto reads one message whole into buf.
func readInto(ctx context.Context, c *websocket.Conn, buf *bytes.Buffer) (websocket.MessageType, error) {
	typ, r, err := c.Reader(ctx)
	if err != nil {
		return 0, err
	}
	buf.Reset()
	_, err = buf.ReadFrom(r)
	return typ, err
}

// slot is one measurement of one scenario on one path.
type slot struct {
	msgs    int64
	elapsed time.Duration
	lat     []time.Duration // with scenario.latency
	selfCPU time.Duration   // this process: the clients and the upstream
	hopCPU  time.Duration   // the process between (clock ticks)
}

// measure runs s on p for d: each connection echoes messages one after
// another until d has passed (or maxPerConn). A wrong echo or a failed
// read or write fails the slot.
func (p *path) measure(ctx context.Context, s *scenario, d time.Duration) (slot, error) {
	ctx, cancel := context.WithTimeout(ctx, d+slotGrace)
	defer cancel()
	type result struct {
		n   int64
		lat []time.Duration
		err error
	}
	results := make([]result, s.conns)
	var wg sync.WaitGroup
	self, hop := benchenv.SelfCPU(), p.cpu()
	start := time.Now()
	deadline := start.Add(d)
	for i := range s.conns {
		c, buf := p.conns[i], p.bufs[i]
		wg.Go(func() {
			r := &results[i]
			if s.latency {
				r.lat = make([]time.Duration, 0, 1<<14)
			}
			for r.n < maxPerConn && time.Now().Before(deadline) {
				t0 := time.Now()
				if r.err = c.Write(ctx, s.typ, s.payload); r.err != nil {
					return
				}
				typ, err := readInto(ctx, c, buf)
				rtt := time.Since(t0)
				if r.err = err; err != nil {
					return
				}
				if typ != s.typ || !bytes.Equal(buf.Bytes(), s.payload) {
					r.err = fmt.Errorf("the echo is not the message sent (%s of %d bytes, %s of %d back)", s.typ, len(s.payload), typ, buf.Len())
					return
				}
				if s.latency {
					r.lat = append(r.lat, rtt)
				}
				r.n++
			}
		})
	}
	wg.Wait()
	out := slot{elapsed: time.Since(start)}
	out.selfCPU, out.hopCPU = benchenv.SelfCPU()-self, p.cpu()-hop
	for _, r := range results {
		if r.err != nil {
			return out, fmt.Errorf("%s, %s: %w", p.name, s.Name, r.err)
		}
		out.msgs += r.n
		out.lat = append(out.lat, r.lat...)
	}
	return out, nil
}

// cpu is the CPU so far of the process between (0 on the direct path).
func (p *path) cpu() time.Duration {
	if p.hopPID == 0 {
		return 0
	}
	return benchenv.ProcsCPU(func(q benchenv.Proc) bool { return q.PID == p.hopPID })
}
