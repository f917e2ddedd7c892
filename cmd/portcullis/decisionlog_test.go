package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
)

// The proxy's decision log rotates by size and keeps a bounded number of
// files (--decision-log-max-size, --decision-log-keep): a proxy under
// load cannot fill its disk with decisions.
func TestProxyDecisionLogRotates(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithCancel(t.Context())
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"proxy", "--policy", policyFile, "--data-dir", data, "--listen", "127.0.0.1:0",
			"--decision-log-max-size", "2000", "--decision-log-keep", "2"}, strings.NewReader(""), stdout, stderr, func(string) string { return "" })
	}()
	listening := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)`)
	deadline := time.Now().Add(20 * time.Second)
	var addr string
	for addr == "" {
		if m := listening.FindStringSubmatch(stdout.String()); m != nil && strings.Contains(stdout.String(), "decisions:") {
			addr = m[1]
			break
		}
		select {
		case code := <-done:
			t.Fatalf("proxy exited %d before starting: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy did not start: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// 60 denials of about 350 bytes each: some 20 KB of records.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 64<<10)
	for i := range 60 {
		fmt.Fprintf(c, "GET http://denied.example.com/%d HTTP/1.1\r\nHost: denied.example.com\r\n\r\n", i)
		if n, err := c.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 403") {
			t.Fatalf("request %d: %q, %v", i, buf[:n], err)
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("proxy exited %d: %s", code, stderr.String())
	}
	ents, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	total := 0
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), dataplane.DecisionLogName) {
			continue
		}
		logs = append(logs, e.Name())
		b, _ := os.ReadFile(filepath.Join(data, e.Name()))
		if len(b) > 2000 {
			t.Errorf("%s holds %d bytes, over --decision-log-max-size 2000", e.Name(), len(b))
		}
		total += strings.Count(string(b), "\n")
	}
	if strings.Join(logs, " ") != "decisions.jsonl decisions.jsonl.1 decisions.jsonl.2" {
		t.Fatalf("decision logs %v; want the live file and two kept", logs)
	}
	if total == 0 || total >= 60 {
		t.Fatalf("%d records kept; want the newest, fewer than the 60 written", total)
	}
}
