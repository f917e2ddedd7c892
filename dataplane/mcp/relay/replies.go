package relay

import (
	"fmt"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/mcp"
)

// A client's answers to the requests a server sent it (sampling,
// elicitation, roots) are judged by the request they answer: the proxy
// notes each request a server sends on an event stream it relays, per MCP
// endpoint and session, and a POST larger than mcp.max_body_bytes passes
// only when every message in it answers such a request, up to
// mcp.max_response_bytes. A sampling result carrying an image is larger
// than any call an agent makes.

// Session names an MCP session at an endpoint (ID "" for no session).
type Session struct {
	Endpoint Endpoint
	ID       string
}

// serverRequests are the server requests relayed and not answered yet.
type serverRequests struct {
	mu sync.Mutex
	m  map[Session]map[string]time.Time // IDKey → when relayed
}

// Bounds: a server may send any number of requests, and a client need
// never answer.
const (
	maxPendingSessions   = 1024
	maxPendingPerSession = 64
	pendingTTL           = 10 * time.Minute
)

// add notes requests (IDKeys) the server sent in session k.
func (s *serverRequests) add(k Session, ids []string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[Session]map[string]time.Time{}
	}
	pending := s.m[k]
	if pending == nil {
		if len(s.m) >= maxPendingSessions {
			s.expire(now)
		}
		if len(s.m) >= maxPendingSessions {
			return // the larger limit is not offered: answers stay small
		}
		pending = map[string]time.Time{}
		s.m[k] = pending
	}
	for _, id := range ids {
		if len(pending) >= maxPendingPerSession {
			return
		}
		pending[id] = now
	}
}

// expire drops requests older than pendingTTL. Call with mu held.
func (s *serverRequests) expire(now time.Time) {
	for k, pending := range s.m {
		for id, at := range pending {
			if now.Sub(at) >= pendingTTL {
				delete(pending, id)
			}
		}
		if len(pending) == 0 {
			delete(s.m, k)
		}
	}
}

// Waiting reports whether session k has a request of its server waiting
// for its answer at now (the time the answer is judged at): its answers
// may then be larger than mcp.max_body_bytes (OnlyAnswers).
func (rl *Relay) Waiting(k Session, now time.Time) bool {
	s := &rl.pending
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, at := range s.m[k] {
		if now.Sub(at) < pendingTTL {
			return true
		}
	}
	return false
}

// OnlyAnswers says why mreq, larger than mcp.max_body_bytes, may not pass
// as answers to session k's pending requests ("" when every message is
// one).
func (rl *Relay) OnlyAnswers(k Session, mreq *mcp.Request, now time.Time) string {
	s := &rl.pending
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range mreq.Messages {
		if !m.Message.Response {
			return fmt.Sprintf("message %d is not an answer to a request of the server", i)
		}
		key, err := mcp.IDKey(m.ID)
		at, ok := s.m[k][key]
		if err != nil || !ok || now.Sub(at) >= pendingTTL {
			return fmt.Sprintf("message %d answers no request the server sent in this session", i)
		}
	}
	return ""
}

// Answered forgets the requests mreq's answers answer (mreq is forwarded).
func (rl *Relay) Answered(k Session, mreq *mcp.Request) {
	s := &rl.pending
	s.mu.Lock()
	defer s.mu.Unlock()
	pending := s.m[k]
	if pending == nil {
		return
	}
	for _, m := range mreq.Messages {
		if m.Message.Response {
			if key, err := mcp.IDKey(m.ID); err == nil {
				delete(pending, key)
			}
		}
	}
	if len(pending) == 0 {
		delete(s.m, k)
	}
}
