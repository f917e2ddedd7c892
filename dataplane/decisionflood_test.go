package dataplane_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/internal/rotate"
)

// A flood of denials does not push an allowed request out of the proxy's
// own decision log, which rotates by size: the flood is kept one by one up
// to its kind's budget and summarised past it (the counts add up), and a
// 60 KB path makes a small record that keeps the path's length and digest.
func TestDecisionLogKeepsAllowedUnderFlood(t *testing.T) {
	up := startPlainUpstream(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "decisions.jsonl")
	out, err := rotate.Open(logPath, 16<<10, 1) // two files of 16 KiB: about 100 records of today's size
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cfg := plainConfig(t, nil)
	cfg.DecisionLog = out
	a := newAgent(t, cfg)
	setPolicy(t, a, strings.ReplaceAll(restPolicy, "PORT", strconv.Itoa(up.port)), "v1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx, ln); close(done) }()
	defer func() { cancel(); <-done }()

	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String()})}}
	base := fmt.Sprintf("http://api.example.com:%d", up.port)
	get := func(path string) int {
		t.Helper()
		res, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	longPath := "/admin/" + strings.Repeat("x", 60<<10) // the first denial of the kind: kept one by one
	if code := get(longPath); code != http.StatusForbidden {
		t.Fatalf("long path = %d", code)
	}
	const flood = 1500
	for i := range flood {
		if code := get(fmt.Sprintf("/admin/%d", i)); code != http.StatusForbidden {
			t.Fatalf("denial %d = %d", i, code)
		}
		if i == flood/2 {
			if code := get("/v1/orders/the-allowed-one"); code != http.StatusOK {
				t.Fatalf("allowed GET = %d", code)
			}
		}
	}
	cancel()
	<-done // the log is written out

	var allowed, individual, summarised, long int
	for _, name := range []string{logPath + ".1", logPath} {
		f, err := os.Open(name)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r decision.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			switch {
			case r.Decision == decision.Allow && r.Path == "/v1/orders/the-allowed-one":
				allowed++
			case len(r.Cuts) > 0:
				long++
				if len(sc.Bytes()) > 2<<10 || r.Cuts[0].Field != "path" || r.Cuts[0].Length != len(longPath) || len(r.Cuts[0].SHA256) != 64 {
					t.Errorf("the long path's record (%d bytes): cuts %+v; want at most 2 KiB, path of %d bytes", len(sc.Bytes()), r.Cuts, len(longPath))
				}
			case r.Summary != nil:
				summarised += int(r.Summary.Count)
			case r.Decision == decision.Deny:
				individual++
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if allowed != 1 {
		t.Fatalf("the allowed request is in the decision log %d times; want once", allowed)
	}
	if long != 1 {
		t.Errorf("the long path's record appears %d times; want once", long)
	}
	if individual+summarised+long != flood+1 || individual+long < decision.SummaryPerKind {
		t.Errorf("%d denials one by one and %d summarised (+%d long); want %d in all, at least %d one by one",
			individual, summarised, long, flood+1, decision.SummaryPerKind)
	}
}
