package mcp

import "mime"

// IsEventStream reports whether a Content-Type field's value is
// text/event-stream: an MCP server's answer that comes event by event.
func IsEventStream(contentType string) bool {
	if contentType == "application/json" {
		return false // the common answer, without ParseMediaType's allocations
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}
