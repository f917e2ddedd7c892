package decision

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
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
	if n := d.Added(); n != 6 {
		t.Errorf("Added = %d, want 6 (a ring of 4 counts every record)", n)
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
	for range MaxUnwritten + 100 {
		d.Add(Record{Decision: Deny})
	}
	// The batch the writer holds counts against the bound too: exactly
	// MaxUnwritten records were taken for the file.
	if d.Dropped() != 100 {
		t.Fatalf("dropped %d, want 100", d.Dropped())
	}
	if len(d.Snapshot()) != 8 {
		t.Fatalf("ring holds %d records, want 8", len(d.Snapshot()))
	}
	cancel()
	pr.Close() // unblock the writer so its goroutine ends
	<-done
}

// countingWriter records each Write call's bytes.
type countingWriter struct{ writes [][]byte }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// Records that are waiting together go to the file in one write, in the
// order they were added.
func TestDecisionLogBatchesWrites(t *testing.T) {
	var w countingWriter
	d := NewLog(4, &w, slog.New(slog.DiscardHandler))
	for i := range 100 {
		d.Add(Record{Host: "h", Port: i, Decision: Allow})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Write(ctx); close(done) }()
	// The writer wakes for the pending records, gathers for an interval,
	// and writes; cancelling then ends it with nothing left.
	deadline := time.After(10 * time.Second)
	for {
		d.mu.Lock()
		n := d.unwritten
		d.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("%d records still unwritten", n)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
	if len(w.writes) != 1 {
		t.Fatalf("%d writes, want the 100 pending records in one", len(w.writes))
	}
	lines := bytes.Split(bytes.TrimSuffix(w.writes[0], []byte("\n")), []byte("\n"))
	if len(lines) != 100 {
		t.Fatalf("%d lines, want 100", len(lines))
	}
	for i, line := range lines {
		var r Record
		if err := json.Unmarshal(line, &r); err != nil || r.Port != i {
			t.Fatalf("line %d = %s (%v), want the record with port %d", i, line, err, i)
		}
	}
}

// failingWriter refuses every write while failing is set.
type failingWriter struct {
	mu      sync.Mutex
	failing bool
	calls   int
	written bytes.Buffer
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.failing {
		return 0, io.ErrClosedPipe
	}
	return w.written.Write(p)
}

func (w *failingWriter) set(failing bool) {
	w.mu.Lock()
	w.failing = failing
	w.mu.Unlock()
}

// While the file cannot be written the writer keeps taking the records
// (the room is freed, nothing stays counted as unwritten), they stay in
// the ring and are counted as dropped; once the file takes writes again,
// records reach it again.
func TestDecisionLogWriteFailure(t *testing.T) {
	w := &failingWriter{failing: true}
	d := NewLog(8, w, slog.New(slog.DiscardHandler))
	d.retryAfter = 0 // try again at every batch
	d.Add(Record{Decision: Deny})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Write(ctx); close(done) }()
	for range 3 * MaxUnwritten {
		d.Add(Record{Decision: Allow})
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.Dropped() == 0 && time.Now().Before(deadline) {
		d.Add(Record{Decision: Allow})
		time.Sleep(time.Millisecond)
	}
	if d.Dropped() == 0 {
		t.Fatal("records missed by a failing file were not counted")
	}
	if got := len(d.Snapshot()); got != 8 {
		t.Fatalf("ring holds %d records, want 8", got)
	}
	w.set(false)
	for time.Now().Before(deadline) {
		d.Add(Record{Decision: Audit, Host: "after.example.com"})
		w.mu.Lock()
		back := bytes.Contains(w.written.Bytes(), []byte("after.example.com"))
		w.mu.Unlock()
		if back {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	if !bytes.Contains(w.written.Bytes(), []byte("after.example.com")) {
		t.Fatal("the writer did not write again once the file took writes")
	}
	d.mu.Lock()
	unwritten := d.unwritten
	d.mu.Unlock()
	if unwritten != 0 {
		t.Fatalf("%d records still counted unwritten after the writer ended", unwritten)
	}
}
