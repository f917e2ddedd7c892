package mcp

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// The event reader splits as a client's parser does: every line end,
// data lines joined, an unfinished last event dropped, and an event past
// the bound refused rather than passed on unread.
func TestEventReader(t *testing.T) {
	stream := "data: a\r\ndata:b\r\n\r\n: c\rid: 1\rdata: x\r\r" + "event: e\ndata: {\n\ndata: unfinished\n"
	er := NewEventReader(strings.NewReader(stream), 1<<10)
	var got []string
	for {
		ev, err := er.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(ev.Data)+"|"+strings.Join(bytesStrings(ev.Fields), ""))
	}
	want := []string{"a\nb|", "x|: c\rid: 1\r", "{|event: e\n"}
	if strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("events %q, want %q", got, want)
	}
	er = NewEventReader(strings.NewReader("data: "+strings.Repeat("x", 2000)+"\n\n"), 1<<10)
	if _, err := er.Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("an event past the bound: %v, want ErrEventTooLarge", err)
	}
}

func bytesStrings(b [][]byte) []string {
	s := make([]string, len(b))
	for i := range b {
		s[i] = string(b[i])
	}
	return s
}
