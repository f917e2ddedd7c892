package mcp

import (
	"encoding/json"
	"fmt"
	"io"
)

// ReadListAnswer reads the answer to the tools/list request whose id is id
// from body, a server's answer of at most max bytes: one JSON message, or
// (stream) an event stream, one of whose events holds it. found is false
// when nothing in body answers the request; an error is a body over max,
// one that cannot be read, or an answer ReadToolsList refuses. The proxy
// reads its own listing with it, and `portcullis mcp fingerprint` the
// answers an MCP client read.
func ReadListAnswer(body io.Reader, stream bool, id json.RawMessage, max int) (tools []Tool, next string, found bool, err error) {
	if !stream {
		msg, err := io.ReadAll(io.LimitReader(body, int64(max)+1))
		if err != nil {
			return nil, "", false, err
		}
		if len(msg) > max {
			return nil, "", false, fmt.Errorf("the server's answer is over %d bytes", max)
		}
		return ReadToolsList(msg, id)
	}
	events := NewEventReader(body, max)
	for {
		ev, err := events.Next()
		if err == io.EOF {
			return nil, "", false, nil
		}
		if err != nil {
			return nil, "", false, err
		}
		if !ev.Message() {
			continue // a priming event, a comment …
		}
		if tools, next, found, err := ReadToolsList(ev.Data, id); err != nil || found {
			return tools, next, found, err
		}
	}
}
