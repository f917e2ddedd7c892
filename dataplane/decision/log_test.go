package decision

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
)

func TestDecisionLogWritesJSONLines(t *testing.T) {
	var buf bytes.Buffer
	d := NewLog(4, &buf, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Write(ctx); close(done) }()
	for i := range 6 {
		d.Add(Record{Host: "h", Port: i, Decision: Allow})
	}
	cancel()
	<-done
	var ports []int
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		ports = append(ports, r.Port)
	}
	if len(ports) != 6 {
		t.Fatalf("file has %d records, want all 6: %v", len(ports), ports)
	}
	snap := d.Snapshot()
	if len(snap) != 4 || snap[0].Port != 2 || snap[3].Port != 5 {
		t.Fatalf("ring = %+v, want the last 4, oldest first", snap)
	}
}

// A writer that never returns cannot hold traffic: records beyond the
// queue are counted as dropped and kept in the ring.
func TestDecisionLogNeverBlocks(t *testing.T) {
	pr, pw := io.Pipe() // nobody reads: the first write blocks forever
	defer pr.Close()
	d := NewLog(8, pw, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Write(ctx); close(done) }()
	for range queueSize + 100 {
		d.Add(Record{Decision: Deny})
	}
	if d.Dropped() < 99 {
		t.Fatalf("dropped %d, want at least 99", d.Dropped())
	}
	if len(d.Snapshot()) != 8 {
		t.Fatalf("ring holds %d records, want 8", len(d.Snapshot()))
	}
	cancel()
	pr.Close() // unblock the writer so its goroutine ends
	<-done
}
