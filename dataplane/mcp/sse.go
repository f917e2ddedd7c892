package mcp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Event is one event of a text/event-stream, as the server sent it (raw,
// the blank line that ends it included), with its data (the data lines
// joined with "\n") and its other lines (fields: comments, id, event,
// retry, each with its line end).
type Event struct {
	Raw     []byte
	Data    []byte
	HasData bool
	Fields  [][]byte
}

// Message reports whether ev carries a JSON-RPC message, which the proxy
// must read before passing it on. An event without data — a comment, a
// retry, an id or an event name alone — carries none, and neither does
// one whose data is empty: a resumable server's priming event (MCP
// 2025-11-25: an id, perhaps a retry and an event name, and an empty data
// line), which clients skip. Such events are relayed as they came
// (Bytes). Empty data on a line that ends in a lone CR is a message all
// the same (and refused, not being JSON): a client that ends lines only
// at LF, as the MCP Go SDK's does, reads what follows the CR as that
// line's data.
// Non-empty data is always a message, even blank.
func (ev *Event) Message() bool {
	switch {
	case !ev.HasData:
		return false
	case len(ev.Data) > 0:
		return true
	}
	return ev.loneCR()
}

// loneCR reports whether a line of ev ends in a lone CR (the reader ends
// lines only at CR, LF or CRLF, so a CR not followed by LF ends one).
func (ev *Event) loneCR() bool {
	for i, b := range ev.Raw {
		if b == '\r' && (i+1 == len(ev.Raw) || ev.Raw[i+1] != '\n') {
			return true
		}
	}
	return false
}

// RelayFields are the fields of ev to relay with it: all of them, unless
// a line of ev ends in a lone CR (see Bytes); then its id, event and
// retry fields alone, each line as the proxy read it — no comment nor
// field of no meaning, whose bytes a client ending lines only at LF would
// have read as part of another line.
func (ev *Event) RelayFields() [][]byte {
	if !ev.loneCR() {
		return ev.Fields
	}
	var kept [][]byte
	for _, f := range ev.Fields {
		name, _, _ := bytes.Cut(bytes.TrimRight(f, "\r\n"), []byte(":"))
		switch string(name) {
		case "id", "event", "retry":
			kept = append(kept, f)
		}
	}
	return kept
}

// Bytes is ev as the proxy relays it unchanged: the bytes the server sent
// (CRLF line ends included), unless a line of ev ends in a lone CR. A
// client that ends lines only at LF and keeps the CR inside the line (the
// MCP Go SDK's) reads such an event differently from the proxy and from
// clients ending lines at CR too (the TypeScript SDK, browsers): what
// follows the CR joins the line before it, so its data is other bytes
// than the proxy judged. Such an event goes re-encoded from what the
// proxy read — its RelayFields and data, every line ended with LF — which
// every client reads alike.
func (ev *Event) Bytes() []byte {
	if !ev.loneCR() {
		return ev.Raw
	}
	return EventBytes(ev.RelayFields(), ev.Data, ev.HasData)
}

// EventBytes is an event of the fields given (each with its line end, as
// an EventReader reads them) and, when hasData, data: each field's line
// ended with LF (a client that ends lines only at LF would read a field
// ended with a lone CR and the line after it as one line), one "data:"
// line per line of data, then the blank line.
func EventBytes(fields [][]byte, data []byte, hasData bool) []byte {
	var b []byte
	for _, f := range fields {
		b = append(b, bytes.TrimRight(f, "\r\n")...)
		b = append(b, '\n')
	}
	if hasData {
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			b = append(b, "data: "...)
			b = append(b, line...)
			b = append(b, '\n')
		}
	}
	return append(b, '\n')
}

// ErrEventTooLarge is an event longer than an EventReader's bound.
var ErrEventTooLarge = errors.New("an event of the server's stream is too large to inspect")

// EventReader splits a stream into events as the HTML standard's parser
// does: lines end with CRLF, LF or CR, a blank line ends an event, a line
// "data: x" or "data:x" adds x to its data.
type EventReader struct {
	r       *bufio.Reader
	max     int
	started bool // the stream's first line was read
}

// bom is a UTF-8 byte order mark, which a stream may start with: the
// HTML standard's parser (and a client decoding the stream as UTF-8)
// drops it, so "\uFEFFdata: x" is a data line.
var bom = []byte("\xEF\xBB\xBF")

// NewEventReader reads events of at most max bytes from r.
func NewEventReader(r io.Reader, max int) *EventReader {
	return &EventReader{r: bufio.NewReaderSize(r, 32<<10), max: max}
}

// Next returns the next event; io.EOF at the end of the stream. An
// unfinished last event is dropped, as a client's parser drops it.
func (er *EventReader) Next() (Event, error) {
	var ev Event
	for {
		line, err := er.line()
		if len(line) > 0 {
			ev.Raw = append(ev.Raw, line...)
			if len(ev.Raw) > er.max {
				return Event{}, ErrEventTooLarge
			}
		}
		if err != nil {
			return Event{}, err
		}
		content := bytes.TrimRight(line, "\r\n")
		if !er.started {
			er.started = true
			content = bytes.TrimPrefix(content, bom)
			line = bytes.TrimPrefix(line, bom) // a rewritten event goes without it
		}
		if len(content) == 0 {
			return ev, nil
		}
		name, value, _ := bytes.Cut(content, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(name) == "data" {
			if ev.HasData {
				ev.Data = append(ev.Data, '\n')
			}
			ev.Data = append(ev.Data, value...)
			ev.HasData = true
			continue
		}
		ev.Fields = append(ev.Fields, line)
	}
}

// line returns the next line with its end (CRLF, LF or a lone CR).
func (er *EventReader) line() ([]byte, error) {
	var line []byte
	for {
		b, err := er.r.ReadByte()
		if err != nil {
			return line, err
		}
		line = append(line, b)
		switch b {
		case '\n':
			return line, nil
		case '\r':
			if next, err := er.r.Peek(1); err == nil && next[0] == '\n' {
				er.r.ReadByte()
				line = append(line, '\n')
			}
			return line, nil
		}
		if len(line) > er.max {
			return line, nil // next refuses the event
		}
	}
}
