package hold

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/portcullis-dev/portcullis/dataplane/mcp"
)

// maxRelayed bounds a JSON answer (or an error's body) read whole to be
// sent as one event.
const maxRelayed = 16 << 20

// sseRelay is the writer an approved call's answer goes through once the
// proxy has answered the agent with an event stream: an event stream
// from the server is passed on as its events, a JSON answer becomes one
// `message` event, and an HTTP error a JSON-RPC error event
// (ServerErrorCode). The server's header fields go nowhere: the agent's
// were sent with the stream.
type sseRelay struct {
	w      http.ResponseWriter
	header http.Header
	mreq   *mcp.Request
	status int
	pass   bool // an event stream, passed on
	buf    bytes.Buffer
	over   bool // the answer passed maxRelayed
}

func (s *sseRelay) Header() http.Header { return s.header }

func (s *sseRelay) WriteHeader(code int) {
	if s.status != 0 {
		return
	}
	s.status = code
	s.pass = code < 300 && mcp.IsEventStream(s.header.Get("Content-Type"))
}

func (s *sseRelay) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	if s.pass {
		return s.w.Write(b)
	}
	if s.buf.Len()+len(b) > maxRelayed {
		s.over = true
		return len(b), nil
	}
	return s.buf.Write(b)
}

// FlushError flushes what an event stream passed on (forward flushes
// after each read of a stream).
func (s *sseRelay) FlushError() error {
	if !s.pass {
		return nil
	}
	return http.NewResponseController(s.w).Flush()
}

// event writes data as one `message` event and flushes it.
func (s *sseRelay) event(data []byte) {
	fmt.Fprintf(s.w, "event: message\ndata: %s\n\n", data)
	http.NewResponseController(s.w).Flush()
}

// finish writes the answer read whole as its event.
func (s *sseRelay) finish() {
	if s.pass {
		return
	}
	var compact bytes.Buffer
	if s.status != 0 && s.status < 300 && !s.over && json.Compact(&compact, s.buf.Bytes()) == nil {
		s.event(compact.Bytes())
		return
	}
	data := map[string]any{"status": s.status}
	if s.buf.Len() > 0 && s.buf.Len() <= 4096 && !s.over {
		data["body"] = s.buf.String()
	}
	why := fmt.Sprintf("the server answered HTTP %d", s.status)
	switch {
	case s.status == 0:
		why = "the server did not answer"
	case s.status < 300:
		why = "the server's answer was not JSON"
	}
	s.event(s.mreq.DenyBody(ServerErrorCode, "held call approved and forwarded, but "+why, data))
}
