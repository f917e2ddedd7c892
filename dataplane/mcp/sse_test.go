package mcp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane/mcp/ssetest"
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

// An event without a JSON-RPC message — a resumable server's priming
// event (MCP 2025-11-25: an id, perhaps a retry, and empty data), a
// comment, a retry, an id or an event name alone — is no message: the
// proxy relays it as it came. Data that is not empty is a message, read
// strictly (and refused when it is not JSON), and so is empty data on a
// line that ends in a lone CR: a client that ends lines only at LF (the
// MCP Go SDK's) reads what follows the CR as that data.
func TestEventMessage(t *testing.T) {
	for _, tc := range []struct {
		stream  string
		message bool
	}{
		{"id: 1\nretry: 1000\ndata: \n\n", false},
		{"id: 1\nretry: 1000\ndata:\n\n", false},
		{"id: 1\nretry: 1000\n\n", false},
		{"event: prime\nid: 0_1\ndata: \n\n", false}, // the MCP Go SDK's
		{"id: 1\r\ndata: \r\n\r\n", false},
		{": keep-alive\n\n", false},
		{"retry: 1000\n\n", false},
		{"id: 7\n\n", false},
		{"event: prime\n\n", false},
		{"data\n\n", false},
		{"\xEF\xBB\xBFdata: \n\n", false},
		{"id: 1\rretry: 5\r\r", false}, // no data line: nothing to read
		{"data: {}\n\n", true},
		{"data: x\n\n", true},
		{"data:  \n\n", true},            // a space is data
		{"data:\ndata:\n\n", true},       // "\n" is data
		{"data: \r{\"id\":1}\n\n", true}, // data "{"id":1}" to a client ending lines at LF
		{"data:\r\r", true},
		{"id: 1\ndata:\n\r", true}, // the blank line ending it is a lone CR
	} {
		er := NewEventReader(strings.NewReader(tc.stream), 1<<10)
		ev, err := er.Next()
		if err != nil {
			t.Fatalf("%q: %v", tc.stream, err)
		}
		if got := ev.Message(); got != tc.message {
			t.Errorf("%q: Message() = %v, want %v", tc.stream, got, tc.message)
		}
		if !tc.message && string(ev.Raw) != tc.stream {
			t.Errorf("%q: Raw = %q, want the event as it came", tc.stream, ev.Raw)
		}
	}
}

// An event relayed unchanged goes as the server sent it (CRLF line ends
// included) unless a line of it ends in a lone CR: the MCP Go SDK's
// client ends lines only at LF, so it would read other data than the
// proxy — here a tool whose description is given twice, encoding/json
// keeping the last. Such an event is re-encoded from what the proxy read,
// its lines ended with LF, without comments or fields of no meaning.
func TestEventBytes(t *testing.T) {
	evil := "data: {\"tools\":[{\"name\":\"X\",\"description\":\"benign\"\r,\"description\":\"EVIL\"\ndata: ,\"inputSchema\":{}}]}\n\n"
	for _, tc := range []struct{ stream, want string }{
		{"id: 1\r\nevent: message\r\ndata: {}\r\n\r\n", "id: 1\r\nevent: message\r\ndata: {}\r\n\r\n"},
		{"id: 1\ndata: \n\n", "id: 1\ndata: \n\n"},
		{": c\n\n", ": c\n\n"},
		{evil, "data: {\"tools\":[{\"name\":\"X\",\"description\":\"benign\"\ndata: ,\"inputSchema\":{}}]}\n\n"},
		{"id: 1\revent: e\rretry: 5\r: c\rdata: {}\r\r", "id: 1\nevent: e\nretry: 5\ndata: {}\n\n"},
		{"id: 1\rretry: 5\r\r", "id: 1\nretry: 5\n\n"},
		{": c\rid: 1\n\n", "id: 1\n\n"},
		{"data: {\r\ndata: }\r\r", "data: {\ndata: }\n\n"},
		{"\xEF\xBB\xBFdata:  x\r\r", "data:  x\n\n"},
	} {
		ev, err := NewEventReader(strings.NewReader(tc.stream), 1<<10).Next()
		if err != nil {
			t.Fatalf("%q: %v", tc.stream, err)
		}
		got := ev.Bytes()
		if string(got) != tc.want {
			t.Errorf("%q: Bytes() = %q, want %q", tc.stream, got, tc.want)
		}
		again, err := NewEventReader(bytes.NewReader(got), 1<<10).Next()
		if err != nil || again.HasData != ev.HasData || string(again.Data) != string(ev.Data) {
			t.Errorf("%q: Bytes() %q reads as data %q (%v), the event's is %q (%v)", tc.stream, got, again.Data, again.HasData, ev.Data, ev.HasData)
		}
		if lf := ssetest.LFOnlyData(got); ev.HasData && (len(lf) != 1 || string(lf[0]) != string(ssetest.TrimLines(ev.Data))) {
			t.Errorf("%q: a client ending lines only at LF reads %q in Bytes() %q; the proxy read %q", tc.stream, lf, got, ev.Data)
		}
	}
}

// FuzzEventReader reads a stream three ways. The events' raw bytes, end
// to end, are the stream up to its last finished event; each event's data
// is what the HTML standard's parser makes of it (lines ending at CRLF,
// CR or LF); and every data line that a client ending lines only at LF
// and trimming spaces (the MCP Go SDK) reads as non-blank lies in an event
// the proxy reads as a message — an event relayed unread carries nothing
// such a client could take for a message. And each event as the proxy
// relays it unchanged (Bytes) reads, to either kind of client, as the
// data the proxy read: checking only where data lies, this fuzz test
// missed a lone CR that makes the Go SDK read other bytes within an event
// the proxy did read.
func FuzzEventReader(f *testing.F) {
	for _, s := range []string{
		"id: 1\nretry: 1000\ndata: \n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
		"event: prime\nid: 0_1\ndata: \n\n: keep-alive\n\nretry: 5\n\nid: 2\n\nevent: x\n\n",
		"data: \r{\"id\":1}\n\n",
		"data:\r\rdata: {}\n\n",
		"\xEF\xBB\xBFdata: a\r\ndata:b\r\n\r\n: c\rid: 1\rdata: x\r\r",
		"data\n\ndata:\ndata:\n\n",
		"data: {\"tools\":[{\"name\":\"X\",\"description\":\"benign\"\r,\"description\":\"EVIL\"\ndata: ,\"inputSchema\":{}}]}\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		er := NewEventReader(bytes.NewReader(stream), 1<<12)
		var events []Event
		for {
			ev, err := er.Next()
			if err != nil {
				break
			}
			events = append(events, ev)
		}
		var raw []byte
		var starts []int
		for _, ev := range events {
			starts = append(starts, len(raw))
			raw = append(raw, ev.Raw...)
		}
		if !bytes.HasPrefix(stream, raw) {
			t.Fatalf("the events' bytes %q are not the stream's %q", raw, stream)
		}
		ref := htmlEvents(raw)
		if len(ref) != len(events) {
			t.Fatalf("%d events, the HTML standard's parser finds %d", len(events), len(ref))
		}
		for i, ev := range events {
			if ev.HasData != ref[i].hasData || string(ev.Data) != ref[i].data {
				t.Fatalf("event %d: data %q (%v), the HTML standard's parser reads %q (%v)", i, ev.Data, ev.HasData, ref[i].data, ref[i].hasData)
			}
		}
		for i, ev := range events {
			out := ev.Bytes()
			again, err := NewEventReader(bytes.NewReader(out), len(out)+1).Next()
			if err != nil || again.HasData != ev.HasData || string(again.Data) != string(ev.Data) {
				t.Fatalf("event %d (%q) relayed as %q reads as data %q (%v); the proxy read %q (%v)", i, ev.Raw, out, again.Data, again.HasData, ev.Data, ev.HasData)
			}
			// A client ending lines only at LF: the stream's first event
			// may start with a byte order mark, which that client (the
			// Go SDK's) does not drop — reading no data there, not other.
			lf := ssetest.LFOnlyData(bytes.TrimPrefix(out, bom))
			if want := ssetest.TrimLines(ev.Data); ev.HasData && (len(lf) != 1 || string(lf[0]) != string(want)) || !ev.HasData && len(lf) != 0 {
				t.Fatalf("event %d (%q) relayed as %q: a client ending lines only at LF reads %q; the proxy read %q", i, ev.Raw, out, lf, ev.Data)
			}
		}
		// Lines as a client ending them only at LF reads them.
		for at := 0; at < len(raw); {
			end := bytes.IndexByte(stream[at:], '\n')
			line := stream[at:]
			if end >= 0 {
				line = stream[at : at+end]
			}
			name, value, found := bytes.Cut(bytes.TrimRight(line, "\r"), []byte(":"))
			if found && string(name) == "data" && len(bytes.TrimSpace(value)) > 0 {
				i := len(starts) - 1
				for starts[i] > at {
					i--
				}
				if !events[i].Message() {
					t.Fatalf("event %d (%q) is no message, but a client ending lines at LF reads data %q in it", i, events[i].Raw, bytes.TrimSpace(value))
				}
			}
			if end < 0 {
				break
			}
			at += end + 1
		}
	})
}

type htmlEvent struct {
	data    string
	hasData bool
}

// htmlEvents splits a stream of finished events as the HTML standard's
// parser does, keeping events without data.
func htmlEvents(stream []byte) []htmlEvent {
	stream = bytes.TrimPrefix(stream, bom)
	var events []htmlEvent
	var cur htmlEvent
	for len(stream) > 0 {
		i := bytes.IndexAny(stream, "\r\n")
		if i < 0 {
			break // unfinished
		}
		line := string(stream[:i])
		n := i + 1
		if stream[i] == '\r' && i+1 < len(stream) && stream[i+1] == '\n' {
			n++
		}
		stream = stream[n:]
		if line == "" {
			events = append(events, cur)
			cur = htmlEvent{}
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		if name == "data" {
			if cur.hasData {
				cur.data += "\n"
			}
			cur.data += value
			cur.hasData = true
		}
	}
	return events
}
