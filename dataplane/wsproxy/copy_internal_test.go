package wsproxy

import (
	"bytes"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"
)

// syncBuffer is what a copy wrote, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// TestServerFrameAsItComes: what has come of a server's frame goes to the
// client before the rest has (a review found a chunk held until full).
func TestServerFrameAsItComes(t *testing.T) {
	r, w := io.Pipe()
	var dst syncBuffer
	done := make(chan error, 1)
	go func() { _, err := copyFrames(&dst, r); done <- err }()
	w.Write(append([]byte{0x82, 100}, make([]byte, 10)...)) // a 100-byte binary frame, 10 of its bytes
	for deadline := time.Now().Add(10 * time.Second); dst.Len() < 12; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes went on of the 12 that came", dst.Len())
		}
	}
	w.Write(make([]byte, 90))
	w.Close()
	if err := <-done; err != nil || dst.Len() != 102 {
		t.Errorf("copy ended with %v after %d bytes, want nil after 102", err, dst.Len())
	}
}

// TestIdleCopyHoldsNoBuffer: a quiet server's copy waits for a header
// without a 32 KiB buffer (a review measured 33 KiB an idle WebSocket).
func TestIdleCopyHoldsNoBuffer(t *testing.T) {
	const n = 500
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var writers []*io.PipeWriter
	for range n {
		r, w := io.Pipe()
		writers = append(writers, w)
		go copyFrames(io.Discard, r)
	}
	time.Sleep(100 * time.Millisecond) // every copy blocked reading
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, w := range writers {
		w.Close()
	}
	if per := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n; per > 16<<10 {
		t.Errorf("an idle copy holds %d bytes of heap, want well under its 32 KiB buffer", per)
	}
}
