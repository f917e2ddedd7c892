package wsproxy

import (
	"io"
	"runtime"
	"testing"
	"time"
)

// TestServerFrameAsItComes: what has come of a server's frame goes to the
// client before the rest has (a review found a chunk held until full).
func TestServerFrameAsItComes(t *testing.T) {
	src, server := io.Pipe()
	client, dst := io.Pipe()
	done := make(chan error, 1)
	go func() { _, err := copyFrames(dst, src); dst.CloseWithError(err); done <- err }()
	go server.Write(append([]byte{0x82, 100}, make([]byte, 10)...)) // a 100-byte binary frame, 10 of its bytes
	got := make(chan error, 1)
	go func() { _, err := io.ReadFull(client, make([]byte, 12)); got <- err }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the 12 bytes that came did not go on before the rest of the frame")
	}
	go func() { server.Write(make([]byte, 90)); server.Close() }()
	rest, err := io.ReadAll(client)
	if err != nil || len(rest) != 90 || <-done != nil {
		t.Errorf("the rest of the frame: %d bytes, %v; want 90", len(rest), err)
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
