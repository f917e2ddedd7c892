package hold

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/policy"
)

// JSON-RPC error codes of held calls (the implementation-defined server
// error range; the proxy's others: -32001 denied by policy, -32003 a
// tools/list that could not be filtered, -32029 over a rate limit).
const (
	// RefusedCode: a held call that was not forwarded (its data's
	// reason_code says why).
	RefusedCode = -32004
	// ServerErrorCode: a held call approved and forwarded, whose server
	// answered an HTTP error, relayed on the event stream the proxy had
	// already opened.
	ServerErrorCode = -32005
)

// CallOf is the call to file for req, allowed by d under the policy
// version labelled version: msg is its tools/call (nil for a REST call,
// whose arguments are body).
//
// A tools/call's arguments are its params.arguments exactly as sent ({}
// when absent), their digest policy.ArgumentsDigest's (RFC 8785 form), as
// decision records carry it. A REST call's arguments are its body's
// text exactly as sent (JSON or not; the gateway shows it as JSON when it
// is), and their digest "sha256:" and the hex SHA-256 of those bytes; a
// body that is not UTF-8 text (or holds a NUL) cannot be shown to a
// person, and is refused.
func CallOf(req *policy.Request, d policy.Decision, version string, msg *policy.MCPMessage, body []byte) (*Call, error) {
	var key [16]byte
	rand.Read(key[:])
	v, _ := strconv.ParseUint(version, 10, 32)
	c := &Call{
		Key: hex.EncodeToString(key[:]), Binary: req.Binary, Host: req.Host, Port: req.Port,
		Method: req.HTTPMethod, Path: req.Path, PolicyVersion: uint32(v),
		Entry: d.Entry, Rule: d.Rule, Timeout: d.Review,
	}
	if msg != nil {
		args := msg.Arguments
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage("{}")
		}
		digest, err := policy.ArgumentsDigest(args)
		if err != nil {
			return nil, fmt.Errorf("the call's arguments: %w", err)
		}
		if err := tooLarge(len(args), "the call's arguments"); err != nil {
			return nil, err
		}
		c.MCPMethod, c.Tool, c.ArgumentsJSON, c.ArgumentsDigest = msg.Method, msg.Tool, string(args), digest
		return c, nil
	}
	if err := tooLarge(len(body), "the request body"); err != nil {
		return nil, err
	}
	if !utf8.Valid(body) || bytes.IndexByte(body, 0) >= 0 {
		return nil, errors.New("a request body that is not UTF-8 text cannot be held for review")
	}
	sum := sha256.Sum256(body)
	c.ArgumentsJSON, c.ArgumentsDigest = string(body), "sha256:"+hex.EncodeToString(sum[:])
	return c, nil
}

// tooLarge refuses what a person could not be shown whole.
func tooLarge(n int, what string) error {
	if n > policy.MaxReviewedArguments {
		return fmt.Errorf("%s is %d bytes, over the %d a call held for review may show", what, n, policy.MaxReviewedArguments)
	}
	return nil
}

// Answer is how the agent hears of its held call (the package doc).
type Answer struct {
	w     http.ResponseWriter
	mreq  *mcp.Request // nil: a REST call
	token json.RawMessage
	sent  int // progress notifications sent
	relay *sseRelay
}

// NewAnswer prepares the answer to r, a REST call or the single tools/call
// mreq whose body is body.
func NewAnswer(w http.ResponseWriter, r *http.Request, mreq *mcp.Request, body []byte) *Answer {
	a := &Answer{w: w, mreq: mreq}
	if mreq != nil && acceptsEvents(r.Header) {
		var m struct {
			Params struct {
				Meta struct {
					ProgressToken json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &m) == nil && len(m.Params.Meta.ProgressToken) > 0 && string(m.Params.Meta.ProgressToken) != "null" {
			a.token = m.Params.Meta.ProgressToken
		}
	}
	return a
}

func acceptsEvents(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		if strings.Contains(strings.ToLower(v), "text/event-stream") {
			return true
		}
	}
	return false
}

// Progress tells an agent that gave a progress token that its call waits
// (notifications/progress), opening the event stream the first time.
func (a *Answer) Progress(p Progress) {
	if a.token == nil {
		return
	}
	if a.relay == nil {
		h := a.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		a.w.WriteHeader(http.StatusOK)
		a.relay = &sseRelay{w: a.w, header: http.Header{}, mreq: a.mreq}
	}
	a.sent++
	what := "waiting to be filed for review"
	if p.ID != 0 {
		what = fmt.Sprintf("held call %d waits for review until %s", p.ID, p.Deadline.UTC().Format(time.RFC3339))
	}
	note, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": map[string]any{
		"progressToken": a.token, "progress": a.sent, "message": what,
	}})
	a.relay.event(note)
}

// Refuse answers a call that is not forwarded: a JSON-RPC error
// (RefusedCode) for a tools/call — an event when its stream is open,
// else a 403 — and a 403 for REST, with the same fields.
func (a *Answer) Refuse(out Outcome, denialID, version, traceID string) {
	data := map[string]any{"denial_id": denialID, "reason_code": out.Code, "policy_version": version, "reason": out.Reason}
	if out.ID != 0 {
		data["call_id"] = out.ID
	}
	if traceID != "" {
		data["trace_id"] = traceID
	}
	if a.mreq == nil {
		data["error"] = out.Code
		body, _ := json.Marshal(data)
		a.forbidden(append(body, '\n'))
		return
	}
	msg := a.mreq.DenyBody(RefusedCode, "held call not forwarded ("+out.Code+"): "+out.Reason, data)
	if a.relay != nil {
		a.relay.event(msg)
		return
	}
	a.forbidden(msg)
}

// forbidden answers 403 with body, whole (its length given), and flushes
// it.
func (a *Answer) forbidden(body []byte) {
	h := a.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	a.w.WriteHeader(http.StatusForbidden)
	a.w.Write(body)
	a.flush()
}

// flush sends what was written before the call's place is released: a
// proxy that stops waits for held calls' answers (Registry.Close), then
// closes their connections.
func (a *Answer) flush() { http.NewResponseController(a.w).Flush() }

// Writer is where the approved call's answer is written: the request's
// own writer, or the event stream's relay once it is open.
func (a *Answer) Writer() http.ResponseWriter {
	if a.relay != nil {
		return a.relay
	}
	return a.w
}

// Finish ends the answer after the forward (the relay's last event) and
// flushes it.
func (a *Answer) Finish() {
	if a.relay != nil {
		a.relay.finish()
	}
	a.flush()
}
