package ocsf_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func denial(i int) func() ocsf.Event {
	return func() ocsf.Event {
		return ocsf.FromDecision(decision.Record{Time: at, Host: "h", Port: 443, HTTPMethod: "GET", Path: "/" + strings.Repeat("x", i%7),
			Decision: "deny", DenialID: "dn_" + string(rune('a'+i%26))}, ocsf.Proxy)
	}
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// The file sink rotates by size and keeps the number of old files asked
// for; every line is a whole, valid event.
func TestFileRotation(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ocsf.jsonl")
	f, err := ocsf.OpenFile(p, 2000, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		b, _ := json.Marshal(denial(i)())
		if err := f.Write(context.Background(), [][]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "ocsf.jsonl ocsf.jsonl.1 ocsf.jsonl.2" {
		t.Fatalf("files %v, want the live file and two kept", names)
	}
	for _, n := range names {
		st, _ := os.Stat(filepath.Join(dir, n))
		if st.Size() > 2000 {
			t.Errorf("%s is %d bytes, over the 2000 asked", n, st.Size())
		}
		for _, l := range lines(t, filepath.Join(dir, n)) {
			if err := ocsftest.Validate([]byte(l)); err != nil {
				t.Errorf("%s: %v", n, err)
			}
		}
	}
}

// collector is a Splunk HEC stand-in: it keeps each request's token and
// events, and can refuse.
type collector struct {
	mu     sync.Mutex
	auth   []string
	events []map[string]any
	got    chan struct{}
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	dec := json.NewDecoder(strings.NewReader(string(body)))
	c.mu.Lock()
	c.auth = append(c.auth, r.Header.Get("Authorization"))
	for dec.More() {
		var env map[string]any
		if err := dec.Decode(&env); err != nil {
			c.mu.Unlock()
			http.Error(w, err.Error(), 400)
			return
		}
		c.events = append(c.events, env)
	}
	c.mu.Unlock()
	w.Write([]byte(`{"text":"Success","code":0}`))
	select {
	case c.got <- struct{}{}:
	default:
	}
}

func (c *collector) wait(t *testing.T, n int) []map[string]any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		if len(c.events) >= n {
			out := append([]map[string]any(nil), c.events...)
			c.mu.Unlock()
			return out
		}
		c.mu.Unlock()
		select {
		case <-c.got:
		case <-deadline:
			t.Fatalf("collector has %d events, want %d", len(c.events), n)
		}
	}
}

// Events reach a HEC collector in its envelope with the Splunk token;
// while the collector refuses connections they are dropped and counted,
// and once it is back the emitter reports how many were lost.
func TestHECDownThenRecovers(t *testing.T) {
	// A port nothing listens on: connections are refused until the
	// dialer is pointed at the collector.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var target atomic.Value
	target.Store(ln.Addr().String())
	ln.Close()

	c := &collector{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(c)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target.Load().(string))
		},
	}}
	hec := ocsf.NewHEC("http://collector.test/services/collector/event", "tok-123\n", client)
	em := ocsf.NewEmitter(hec, ocsf.Config{Queue: 16, Rest: time.Nanosecond, Product: ocsf.Proxy})
	wrote := make(chan struct{}, 1)
	ocsf.AfterWrite(em, func() {
		select {
		case wrote <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { em.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; srv.Close() }()

	// Down: every event is lost, counted; Emit never blocks even past
	// the queue's 16.
	for i := range 100 {
		em.Emit(denial(i))
	}
	deadline := time.After(10 * time.Second)
	for em.Dropped() < 100 {
		select {
		case <-wrote:
		case <-deadline:
			t.Fatalf("dropped %d of 100 while the collector refused", em.Dropped())
		}
	}
	if em.Written() != 0 {
		t.Fatalf("written %d while down", em.Written())
	}

	// Up again.
	target.Store(srv.Listener.Addr().String())
	em.Emit(denial(1))
	got := c.wait(t, 2)
	var report, ev map[string]any
	for _, env := range got {
		e := env["event"].(map[string]any)
		if e["class_uid"].(float64) == 6008 {
			report = e
		} else {
			ev = e
		}
		b, _ := json.Marshal(e)
		if err := ocsftest.Validate(b); err != nil {
			t.Error(err)
		}
		if env["sourcetype"] != "ocsf" || env["source"] != "portcullis" || env["time"] == nil {
			t.Errorf("envelope %v", env)
		}
	}
	if ev == nil || report == nil {
		t.Fatalf("want the event and a drop report, got %v", got)
	}
	if n := report["unmapped"].(map[string]any)["dropped"].(float64); n != 100 {
		t.Errorf("report says %v dropped, want 100", n)
	}
	c.mu.Lock()
	for _, a := range c.auth {
		if a != "Splunk tok-123" {
			t.Errorf("Authorization %q", a)
		}
	}
	c.mu.Unlock()
}

// A collector that answers with an error loses the batch the same way.
func TestHECRefusesWithStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"text":"Invalid token","code":4}`, http.StatusForbidden)
	}))
	defer srv.Close()
	hec := ocsf.NewHEC(srv.URL, "bad", nil)
	err := hec.Write(context.Background(), [][]byte{[]byte(`{"time":1}`)})
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("err = %v, want the 403", err)
	}
	hec.Close()
}
