package transparent

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// TestTakeHoldsTheStartInOneFill: the reader Take returns takes every byte
// already read in its first fill, however many, so that a reader that
// goes to the connection once it is drained (dataplane's bufferedConn)
// loses none of them.
func TestTakeHoldsTheStartInOneFill(t *testing.T) {
	for _, n := range []int{1, 4096, 10_000} {
		client, server := net.Pipe()
		w := NewWriter(server)
		w.held = bytes.Repeat([]byte{'h'}, n)
		conn, rd := w.Take()
		if conn != server {
			t.Fatalf("Take gave %v, want the connection", conn)
		}
		if _, err := rd.Peek(1); err != nil {
			t.Fatal(err)
		}
		if rd.Buffered() != n {
			t.Errorf("%d bytes held: %d buffered after the first fill, want all", n, rd.Buffered())
		}
		got := make([]byte, n)
		if _, err := io.ReadFull(rd, got); err != nil || !bytes.Equal(got, w.held) {
			t.Fatalf("%d bytes held: read %d of them back, %v", n, len(got), err)
		}
		// What follows is the connection's, read from it directly.
		go client.Write([]byte("rest"))
		rest := make([]byte, 4)
		if rd.Buffered() != 0 {
			t.Fatalf("%d bytes still buffered", rd.Buffered())
		}
		if _, err := io.ReadFull(conn, rest); err != nil || string(rest) != "rest" {
			t.Errorf("after the held bytes the connection gave %q, %v", rest, err)
		}
		client.Close()
		server.Close()
	}
}
